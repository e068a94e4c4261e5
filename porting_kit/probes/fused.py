"""Fused weights (qkv, gate_up): in which order the candidate stacked the reference's shards.

A serving port fuses the reference's ``q_proj`` / ``k_proj`` / ``v_proj`` (or ``gate_proj`` /
``up_proj``) into one parameter, stacking the shards along the output axis in the order its
forward splits them. :func:`fused_shard_orders` finds every candidate tensor that holds
several reference tensors whole (the load's ``weight_map``), locates each shard's row block in
it, and reports the candidate's block order beside the reference's own order (the order of its
state dict: the order the reference module defines them, the order vLLM's
``stacked_params_mapping`` writes them). Facts only: no verdict here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FusedShardOrder:
    """One fused candidate tensor and its shards' row blocks.

    Attributes
    ----------
    candidate_tensor : str
        The fused candidate tensor (``...qkv_proj.weight``).
    shards : list of str
        The reference tensors it holds, in the candidate's row order.
    reference_order : list of str
        The same tensors in the reference's state-dict order.
    offsets : list of int
        The first row of each of ``shards`` in the candidate tensor.
    permutation : list of int
        ``permutation[i]`` is the reference-order index of the candidate's ``i``-th block
        (``[1, 0, 2]``: the candidate stacks k, q, v where the reference has q, k, v).
    """

    candidate_tensor: str
    shards: list[str]
    reference_order: list[str]
    offsets: list[int]
    permutation: list[int]

    @property
    def in_reference_order(self) -> bool:
        return self.permutation == sorted(self.permutation)


def _row_offset(block, fused) -> int | None:
    """The row where ``block`` [shape=(rows, ...)] sits whole in ``fused``, or None."""
    import torch

    rows = block.shape[0]
    if block.shape[1:] != fused.shape[1:] or rows > fused.shape[0] or rows == 0:
        return None
    flat = fused.reshape(fused.shape[0], -1)
    starts = torch.nonzero((flat[: fused.shape[0] - rows + 1] == block[0].reshape(1, -1)).all(dim=1))
    for start in starts.flatten().tolist():  # rows equal to the block's first row, then the whole block
        if torch.equal(fused[start:start + rows], block):
            return start
    return None


def fused_shard_orders(weight_map: dict[str, list[str]], ref_sd: dict, cand_sd: dict) -> list[FusedShardOrder]:
    """The block order of every candidate tensor that stacks two or more reference tensors whole.

    Parameters
    ----------
    weight_map : dict of str to list of str
        Candidate tensor -> reference tensors whose values it holds (``WeightLoad.weight_map``).
    ref_sd, cand_sd : dict of str to torch.Tensor
        The reference's and the candidate's state dicts after loading (same dtype).

    Returns
    -------
    list of FusedShardOrder
        One per candidate tensor whose rows are exactly its reference tensors stacked
        (every row covered once); tensors that only partly match are left out.
    """
    position = {name: i for i, name in enumerate(ref_sd)}
    out = []
    for cname, rnames in weight_map.items():
        if len(rnames) < 2 or cname not in cand_sd:
            continue
        fused = cand_sd[cname].detach()
        if fused.dim() == 0:
            continue
        placed = []
        for r in rnames:
            block = ref_sd.get(r)
            if block is None or block.dim() != fused.dim():
                break
            off = _row_offset(block.detach().to(fused.device, fused.dtype), fused)
            if off is None:
                break
            placed.append((off, r, block.shape[0]))
        else:
            placed.sort()
            covered = 0
            for off, _, rows in placed:
                if off != covered:
                    break
                covered += rows
            else:
                if covered == fused.shape[0]:
                    shards = [r for _, r, _ in placed]
                    ref_order = sorted(shards, key=lambda n: position.get(n, 0))
                    out.append(FusedShardOrder(cname, shards, ref_order, [o for o, _, _ in placed],
                                               [ref_order.index(s) for s in shards]))
    return out
