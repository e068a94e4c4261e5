"""Property tests of the fused-projection shard-order hypothesis (issue 29, TP class).

Generated: head counts, kv head counts (including fewer kv heads than ranks: replicated),
head sizes, TP sizes, and how the fused [Q|K|V] (or [gate|up]) weight was split over the
ranks: per part (correct, vLLM's layout), a plain ``chunk(N)[rank]`` of the whole fused
tensor, ranks reversed, k/v swapped inside each rank, or one part's shard taken from the
next rank. The rank outputs are ``x @ W_r^T`` of the split; the hypothesis must name every
wrong split (``tp.shard_order``, the rows each rank holds in the evidence) and pass the
correct one. Cheap: plain tensors, no rank processes.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
hyp = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from porting_kit.checks.tp import _fused  # noqa: E402
from porting_kit.probes.tp import FusedShard, expected_rank_sources, fused_shard_fault  # noqa: E402

SPLITS = ("per_part", "plain_chunk", "ranks_reversed", "kv_swapped", "k_from_next_rank")
THR = 1e-4


def _rows_per_rank(widths, n, head, split):
    """Row indices of the fused weight each rank keeps under ``split``."""
    want = expected_rank_sources(widths, n, head)
    total = sum(widths)
    if split == "per_part":
        return want
    if split == "plain_chunk":
        return [list(c) for c in torch.arange(total).chunk(n)]
    if split == "ranks_reversed":
        return want[::-1]
    out = []
    for r in range(n):
        rows = want[r]
        q_w = widths[0] // n
        k_w = (len(rows) - q_w) // 2
        q, k, v = rows[:q_w], rows[q_w:q_w + k_w], rows[q_w + k_w:]
        if split == "kv_swapped":
            out.append(q + v + k)
        else:  # k_from_next_rank: the k shard of rank (r + 1) % n
            nxt = want[(r + 1) % n]
            out.append(q + nxt[q_w:q_w + k_w] + v)
    return out


@st.composite
def fused_case(draw):
    n = draw(st.sampled_from([2, 4]))
    head = draw(st.sampled_from([2, 4, 8]))
    heads = n * draw(st.integers(1, 3))
    kv = draw(st.sampled_from(sorted({h for h in (1, 2, n, heads) if heads % h == 0 and (h % n == 0 or n % h == 0)})))
    split = draw(st.sampled_from(SPLITS))
    seed = draw(st.integers(0, 2**16))
    return n, head, heads, kv, split, seed


def _build(n, head, heads, kv, split, seed):
    g = torch.Generator().manual_seed(seed)
    hidden, tokens = 16, 5
    widths = [heads * head, kv * head, kv * head]
    w = torch.randn(sum(widths), hidden, generator=g)
    x = torch.randn(1, tokens, hidden, generator=g)
    full = x @ w.T
    parts = [(f"attn.{p}", t) for p, t in zip(("q_proj", "k_proj", "v_proj"), full.split(widths, -1))]
    ranks = [x @ w[torch.tensor(rows)].T for rows in _rows_per_rank(widths, n, head, split)]
    return parts, ranks, widths


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(fused_case())
def test_fused_shard_order_is_named_for_every_wrong_split_and_not_for_the_right_one(case):
    n, head, heads, kv, split, seed = case
    parts, ranks, widths = _build(*case)
    f = fused_shard_fault("attn.qkv_proj", parts, ranks, n, THR, head)
    want = expected_rank_sources(widths, n, head)
    held = _rows_per_rank(widths, n, head, split)
    if held == want:  # e.g. k/v from the next rank when every rank holds the same replicated kv head
        assert f is None
        return
    assert isinstance(f, FusedShard)
    assert len(f.sources) == len(f.expected) == n
    assert f.sources != f.expected
    if split == "plain_chunk":
        # rank 0 starts with the first rows of q_proj whatever it holds after them
        assert f.sources[0].startswith("q_proj[0:")
    finding = _fused(type("R", (), {"fused": f})(), {"world_size": n})
    assert finding.code == "tp.shard_order" and finding.where.candidate == "attn.qkv_proj"
    assert finding.evidence["rank_sources"].startswith("rank 0: ")


def test_a_plain_chunk_at_tp_2_puts_all_of_q_on_rank_0():
    parts, ranks, _ = _build(2, 8, 4, 2, "plain_chunk", 0)
    f = fused_shard_fault("attn.qkv_proj", parts, ranks, 2, THR, 8)
    assert f.sources == ["q_proj[0:32]", "k_proj[0:16], v_proj[0:16]"]
    assert f.expected == ["q_proj[0:16], k_proj[0:8], v_proj[0:8]", "q_proj[16:32], k_proj[8:16], v_proj[8:16]"]


def test_outputs_that_are_no_sharding_of_the_parts_are_not_named():
    parts, ranks, _ = _build(2, 4, 2, 2, "per_part", 1)
    noisy = [r + 0.1 * torch.randn_like(r) for r in ranks]
    assert fused_shard_fault("attn.qkv_proj", parts, noisy, 2, THR, 4) is None
