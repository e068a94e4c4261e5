"""Fused qkv / gate_up shard order (probes/fused.py), generated many ways (issue 26, point 8)."""

import itertools

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from porting_kit.probes.fused import fused_shard_orders  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 4), cols=st.integers(1, 9), seed=st.integers(0, 2**31 - 1),
       perm_index=st.integers(0, 23), bias=st.booleans(), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_block_permutation_is_found(n, cols, seed, perm_index, bias, dtype):
    g = torch.Generator().manual_seed(seed)
    rows = [int(r) for r in torch.randint(1, 6, (n,), generator=g)]
    names = [f"layers.0.attn.{s}_proj.{'bias' if bias else 'weight'}" for s in "qkvg"[:n]]
    ref_sd = {name: (torch.randn((r,) if bias else (r, cols), generator=g)).to(getattr(torch, dtype))
              for name, r in zip(names, rows)}
    perms = list(itertools.permutations(range(n)))
    perm = list(perms[perm_index % len(perms)])
    fused_name = f"blocks.0.qkv.{'bias' if bias else 'weight'}"
    cand_sd = {fused_name: torch.cat([ref_sd[names[i]] for i in perm])}
    weight_map = {fused_name: list(reversed(names))}  # the map's order carries no position
    (o,) = fused_shard_orders(weight_map, ref_sd, cand_sd)
    assert o.shards == [names[i] for i in perm]
    assert o.reference_order == names
    assert o.permutation == perm
    assert o.in_reference_order == (perm == sorted(perm))
    assert o.offsets == [sum(rows[i] for i in perm[:j]) for j in range(n)]


def test_partial_or_transformed_fusion_is_left_out():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    ref_sd = {"q.weight": q, "k.weight": k}
    scaled = {"qk.weight": torch.cat([q, k * 2])}  # k transformed: not a pure stacking
    assert fused_shard_orders({"qk.weight": ["q.weight", "k.weight"]}, ref_sd, scaled) == []
    extra = {"qk.weight": torch.cat([k, q, torch.zeros(1, 3)])}  # a row nobody wrote
    assert fused_shard_orders({"qk.weight": ["q.weight", "k.weight"]}, ref_sd, extra) == []
    single = {"q2.weight": q.clone()}
    assert fused_shard_orders({"q2.weight": ["q.weight"]}, ref_sd, single) == []
