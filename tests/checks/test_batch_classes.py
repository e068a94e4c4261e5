"""Property test (issue 29, B3): positions that ignore the padding are ``batch.position_ids``.

A tiny model (token embedding + absolute position embedding + dropout + per-token MLP) is
drawn with its position-embedding kind (learned table, sinusoidal from an ``inv_freq``
buffer), width and request lengths; the candidate's batched forward pads left or right and
passes position ids ``arange(max_len)`` shared by the batch (batch axis 1), ``arange``
per row, or ``cumsum(mask) - 1``. Left padding without mask-aware positions must give
``batch.position_ids`` at the position embedding (both offsets in the evidence); every other
combination is clean and passes.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from porting_kit import run_check  # noqa: E402
from porting_kit.spec import Spec  # noqa: E402

PROPERTY = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
nn = torch.nn


class Sinusoidal(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, position_ids):
        ang = position_ids[..., None].float() * self.inv_freq
        return torch.cat([ang.sin(), ang.cos()], dim=-1)


class Tiny(nn.Module):
    def __init__(self, kind: str, hidden: int, vocab: int = 50, max_pos: int = 64):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.embed_positions = nn.Embedding(max_pos, hidden) if kind == "learned" else Sinusoidal(hidden)
        self.dropout = nn.Dropout(0.1)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids, position_ids=None):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.dropout(self.embed_tokens(input_ids) + self.embed_positions(position_ids))
        return self.head(x + self.mlp(x))


def batch_spec(kind: str, hidden: int, lengths: list[int], side: str, positions: str, seed: int) -> Spec:
    def model():
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return Tiny(kind, hidden).eval()

    ids = torch.randint(1, 50, (1, max(lengths)), generator=torch.Generator().manual_seed(seed))

    def run(m, inputs):
        return m(inputs["input_ids"])

    def run_batch(m, requests):
        L = max(r["input_ids"].shape[1] for r in requests)
        rows, masks = [], []
        for r in requests:
            x = r["input_ids"][0]
            pad = torch.zeros(L - x.shape[0], dtype=x.dtype)
            rows.append(torch.cat([pad, x] if side == "left" else [x, pad]))
            masks.append(torch.cat([torch.zeros_like(pad), torch.ones_like(x)] if side == "left"
                                   else [torch.ones_like(x), torch.zeros_like(pad)]))
        batch, mask = torch.stack(rows), torch.stack(masks)
        pos = {"shared": torch.arange(L).unsqueeze(0),
               "per_row": torch.arange(L).expand(len(requests), L),
               "cumsum_mask": (mask.cumsum(-1) - 1).clamp_min(0)}[positions]
        out = m(batch, position_ids=pos)
        n = [r["input_ids"].shape[1] for r in requests]
        return [out[i:i + 1, L - k:] if side == "left" else out[i:i + 1, :k] for i, k in enumerate(n)]

    mod = types.SimpleNamespace(reference=model, candidate=model, inputs=lambda: {"input_ids": ids},
                                run_reference=run, run_candidate=run, run_candidate_batch=run_batch,
                                batch_inputs=lambda: [{"input_ids": ids[:, :k]} for k in lengths])
    return Spec(module=mod, name="batch_positions")


@st.composite
def batches(draw):
    n = draw(st.integers(2, 4))
    lengths = draw(st.lists(st.integers(2, 16), min_size=n, max_size=n))
    if len(set(lengths)) == 1:
        lengths[0] += 3
    return dict(kind=draw(st.sampled_from(["learned", "sinusoidal"])), hidden=draw(st.sampled_from([8, 16, 32])),
                lengths=lengths, side=draw(st.sampled_from(["left", "right"])),
                positions=draw(st.sampled_from(["shared", "per_row", "cumsum_mask"])),
                seed=draw(st.integers(0, 2 ** 16)))


@pytest.mark.slow
@PROPERTY
@given(batches())
def test_positions_that_ignore_left_padding_are_named(case):
    rep = run_check(batch_spec(**case), only="batch")
    if case["side"] == "right" or case["positions"] == "cumsum_mask":
        assert rep.codes() == ["batch.ok"], case
        return
    (f,) = rep.findings
    assert f.code == "batch.position_ids", (case, f.code, f.message)
    ev = f.evidence
    assert f.where.candidate == "embed_positions" and ev["first_module"] == "embed_positions"
    L, k = max(case["lengths"]), case["lengths"][ev["row"]]
    assert (ev["position_offset_found"], ev["position_offset_expected"], ev["padding_tokens"]) == (0, L - k, L - k)
    assert ev.get("first_module_broadcast", False) == (case["positions"] == "shared")
