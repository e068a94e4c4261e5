"""Unit tests of porting_kit.probes.capture: the 64-number sketch, records, coarse/fine passes."""

import math

import pytest
import torch

from porting_kit.probes import capture
from porting_kit.probes.capture import (
    PROJ_K,
    Record,
    capture_full,
    capture_summaries,
    coarse_names,
    coarse_walk,
    estimate_abs_err,
    estimate_rel_err,
    subtree_names,
)


def _sketch_by_hand(x: torch.Tensor) -> torch.Tensor:
    """``(S @ x) @ R`` with the module's seeded Gaussian matrices, for ``x`` of shape (rows, d)."""
    rows, d = x.shape
    s = torch.randn(8, rows, generator=torch.Generator().manual_seed(capture._SEED + 2 * rows + 1))
    r = torch.randn(d, 8, generator=torch.Generator().manual_seed(capture._SEED + 2 * d))
    return ((s @ x) @ r).reshape(-1)


class Fixed(torch.nn.Module):
    """Returns a stored tensor (scaled), whatever the input."""

    def __init__(self, value: torch.Tensor, scale: float = 1.0):
        super().__init__()
        self.register_buffer("value", value)
        self.scale = scale

    def forward(self, x):
        return self.value * self.scale


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.act = torch.nn.SiLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Stack(torch.nn.Module):
    def __init__(self, d=4, n=3):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Linear(d, d)
        self.layers = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, d)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _capture(model, x, **kw) -> list[Record]:
    recs: list[Record] = []
    with capture_summaries(model, recs, **kw):
        model(x)
    return recs


def test_sketch_is_64_numbers_of_the_seeded_projection():
    x = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(7))
    (rec,) = _capture(Fixed(x), torch.zeros(1))
    s = rec.out
    assert (s.shape, s.dtype, s.numel, s.slot, s.nonfinite) == ((2, 3, 5), "float32", 30, 0, 0)
    assert PROJ_K == 64 and tuple(s.proj.shape) == (64,) and s.proj.device.type == "cpu"
    expect = _sketch_by_hand(x.reshape(6, 5))  # (batch, seq, d) viewed as (rows, d)
    assert torch.allclose(s.proj, expect, rtol=1e-5, atol=1e-5)
    assert s.norm == pytest.approx(float(expect.norm()) / 8, rel=1e-5)


def test_one_dimensional_and_scalar_outputs_are_one_row():
    v = torch.arange(1.0, 6.0)
    (rec,) = _capture(Fixed(v), torch.zeros(1))
    assert torch.allclose(rec.out.proj, _sketch_by_hand(v.reshape(1, 5)), rtol=1e-5, atol=1e-5)


def test_relative_error_estimate_is_exact_for_a_scaled_tensor():
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(2))
    (ra,) = _capture(Fixed(x), torch.zeros(1))
    (rb,) = _capture(Fixed(x, scale=1.01), torch.zeros(1))
    # the sketch is linear: P(1.01 x) - P(x) = 0.01 P(x)
    assert estimate_rel_err(ra.out, rb.out) == pytest.approx(0.01, rel=1e-4)
    assert estimate_abs_err(ra.out, rb.out) == pytest.approx(0.01 * float(ra.out.proj.norm()) / 8, rel=1e-4)
    assert estimate_rel_err(ra.out, ra.out) == 0.0


def test_relative_error_estimate_tracks_the_true_ratio():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 256, generator=g)
    noise = torch.randn(64, 256, generator=g)
    (ra,) = _capture(Fixed(x), torch.zeros(1))
    (rb,) = _capture(Fixed(x + 0.1 * noise), torch.zeros(1))
    true = float((0.1 * noise).norm() / x.norm())
    assert 0.6 * true < estimate_rel_err(ra.out, rb.out) < 1.4 * true


def test_estimates_are_infinite_for_different_shapes():
    (ra,) = _capture(Fixed(torch.ones(2, 4)), torch.zeros(1))
    (rb,) = _capture(Fixed(torch.ones(4, 2)), torch.zeros(1))
    assert estimate_rel_err(ra.out, rb.out) == math.inf
    assert estimate_abs_err(ra.out, rb.out) == math.inf


def test_nonfinite_output_is_flagged():
    x = torch.ones(2, 3)
    x[1, 1] = float("nan")
    (rec,) = _capture(Fixed(x), torch.zeros(1))
    assert rec.out.nonfinite == 1
    assert math.isnan(estimate_rel_err(rec.out, rec.out))


def test_records_in_completion_order_with_names_depth_and_types():
    model = Stack()
    recs = _capture(model, torch.randn(2, 4))
    keys = [r.key for r in recs]
    assert keys == ["embed", "layers.0.fc", "layers.0.act", "layers.0", "layers.1.fc", "layers.1.act",
                    "layers.1", "layers.2.fc", "layers.2.act", "layers.2", "head", ""]
    assert [r.end for r in recs] == list(range(len(recs)))
    by = {r.key: r for r in recs}
    assert (by[""].depth, by["layers.0"].depth, by["layers.0.fc"].depth) == (0, 2, 3)
    assert (by[""].type, by["layers.1"].type, by["head"].type) == ("Stack", "Block", "Linear")
    assert by["head"].out.shape == (2, 4)


def test_prefix_and_repeated_calls():
    lin = torch.nn.Linear(3, 3)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(self.lin(x))

    recs = _capture(Twice(), torch.randn(1, 3), prefix="ref.")
    assert [(r.key, r.name) for r in recs] == [("ref.lin", "ref.lin"), ("ref.lin#1", "ref.lin"), ("ref.", "ref.")]
    assert recs[0].depth == recs[1].depth == 2


def test_non_floating_output_has_no_sketch():
    class Argmax(torch.nn.Module):
        def forward(self, x):
            return x.argmax(-1)

    (rec,) = _capture(Argmax(), torch.randn(2, 5))
    assert rec.out is None


def test_complex_output_is_sketched_as_real_pairs():
    z = torch.complex(torch.ones(2, 3), torch.full((2, 3), 2.0))
    (rec,) = _capture(Fixed(z), torch.zeros(1))
    expect = _sketch_by_hand(torch.view_as_real(z).flatten(-2))
    assert rec.out.shape == (2, 3) and torch.allclose(rec.out.proj, expect, rtol=1e-5, atol=1e-5)


def test_hooks_are_removed_and_no_grad_inside():
    model = Stack()
    seen = []
    with capture_summaries(model, []):
        seen.append(torch.is_grad_enabled())
        model(torch.randn(1, 4))
    assert seen == [False]
    assert all(not m._forward_hooks for m in model.modules())


def test_buffer_grows_past_256_calls():
    lin = torch.nn.Linear(4, 4)

    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            for _ in range(300):
                x = torch.tanh(self.lin(x))
            return x

    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(5))
    recs = _capture(Loop(), x)
    assert len(recs) == 301 and recs[299].key == "lin#299" and recs[299].out.slot == 299
    y = x
    with torch.no_grad():
        for _ in range(300):
            pre = lin(y)
            y = torch.tanh(pre)
    assert torch.allclose(recs[299].out.proj, _sketch_by_hand(pre), rtol=1e-4, atol=1e-5)


def test_no_host_transfer_per_module_call(monkeypatch):
    """Sketches stay on the device during the pass; one copy to the host at its end."""
    calls = {"inside": 0, "after": 0}
    phase = ["inside"]
    for name in ("cpu", "item", "tolist", "numpy"):
        orig = getattr(torch.Tensor, name)

        def counted(self, *a, _orig=orig, **k):
            calls[phase[0]] += 1
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    model = Stack(n=6)
    recs: list[Record] = []
    with capture_summaries(model, recs):
        model(torch.randn(2, 4))
        phase[0] = "after"
    assert calls["inside"] == 0
    assert len(recs) == 21 and all(r.out.proj is not None for r in recs)
    # one .cpu() of the buffer, then two .tolist() of per-row figures: not one per module
    assert calls["after"] == 3


def test_output_permutation_makes_a_permuted_port_comparable():
    torch.manual_seed(1)
    ref = torch.nn.Linear(4, 6)
    perm = torch.tensor([2, 0, 1, 5, 3, 4])
    cand = torch.nn.Linear(4, 6)
    with torch.no_grad():
        cand.weight.copy_(ref.weight[perm])
        cand.bias.copy_(ref.bias[perm])
    x = torch.randn(3, 4)
    (r,) = _capture(ref, x)
    (plain,) = _capture(cand, x)
    (mapped,) = _capture(cand, x, prefix="c", output_permutation={"c": perm})
    assert estimate_rel_err(r.out, plain.out) > 0.1
    assert estimate_rel_err(r.out, mapped.out) < 1e-5


def test_only_hooks_the_named_modules():
    recs = _capture(Stack(), torch.randn(1, 4), only={"", "layers.1"})
    assert [r.key for r in recs] == ["layers.1", ""]


def test_coarse_names_keep_the_blocks_not_their_insides():
    model = Stack(n=3)
    assert coarse_names(model) == {"", "embed", "layers", "layers.0", "layers.1", "layers.2", "head"}


def test_coarse_names_none_without_a_stack_of_blocks():
    assert coarse_names(Block(4)) is None
    flat = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())  # leaves, not blocks
    assert coarse_names(flat) is None


def _coarse_by_full_walk(model, walk):
    """The definition, on a full ``named_modules()`` walk: every name not inside a block."""
    blocks = [f"{n}.{c}" if n else c for n, m in walk
              if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and len(m) >= 2
              for c, child in m._modules.items() if child is not None and child._modules]
    inside = tuple(b + "." for b in blocks)
    return {n for n, _ in walk if not n.startswith(inside)} if blocks else None


def test_coarse_walk_is_coarse_names_without_entering_the_blocks():
    model = Stack(n=3)
    walk = list(model.named_modules())
    got = coarse_walk(model)
    assert {n for n, _ in got} == _coarse_by_full_walk(model, walk)
    assert [n for n, _ in got] == [n for n, _ in walk if n in _coarse_by_full_walk(model, walk)]
    assert all(m is dict(walk)[n] for n, m in got)
    # a module a block also holds, met there first, stays out (hooked under its outer name it
    # would record the block's calls as its own); met first outside, it is kept
    model.layers[1].shared = model.head
    walk = list(model.named_modules())
    assert "head" not in {n for n, _ in coarse_walk(model)} == _coarse_by_full_walk(model, walk)
    model = Stack(n=3)
    model.layers[1].shared = model.embed
    walk = list(model.named_modules())
    assert "embed" in {n for n, _ in coarse_walk(model)} == _coarse_by_full_walk(model, walk)
    assert coarse_walk(Block(4)) is None
    assert coarse_walk(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())) is None


def test_first_product_is_float32_as_the_product_then_cast():
    s = torch.randn(8, 6, dtype=torch.bfloat16)
    x = torch.randn(6, 5, dtype=torch.bfloat16)
    got = capture._mm_float32(s, x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, (s @ x).float(), atol=0, rtol=0)  # off CUDA: the same ops
    y = torch.randn(6, 5)
    torch.testing.assert_close(capture._mm_float32(s.float(), y), s.float() @ y, atol=0, rtol=0)


def test_coarse_then_fine_pass_covers_every_module():
    model = Stack(n=3)
    x = torch.randn(2, 4)
    coarse = _capture(model, x, only=coarse_names(model))
    fine = _capture(model, x, only=subtree_names(model, "layers.1"))
    assert [r.key for r in fine] == ["layers.1.fc", "layers.1.act", "layers.1"]
    by_c, by_f = {r.key: r for r in coarse}, {r.key: r for r in fine}
    assert torch.equal(by_c["layers.1"].out.proj, by_f["layers.1"].out.proj)
    assert {r.key for r in coarse} | {r.key for r in fine} <= {n for n, _ in model.named_modules()}


def test_subtree_names():
    model = Stack(n=2)
    assert subtree_names(model, "layers.0") == {"layers.0", "layers.0.fc", "layers.0.act"}
    assert subtree_names(model, "") == {n for n, _ in model.named_modules()}
    assert subtree_names(model, "nope") == set()
    assert "layers.10" not in subtree_names(Stack(n=11), "layers.1")


def test_capture_full_returns_inputs_and_outputs_of_named_calls():
    lin = torch.nn.Linear(3, 3)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(self.lin(x))

    model = Twice()
    x = torch.randn(2, 3)
    with capture_full(model, {"lin#1"}) as got:
        y = model(x)
    assert set(got) == {"lin#1"}
    inp, out = got["lin#1"]
    with torch.no_grad():
        assert torch.allclose(inp, lin(x)) and torch.allclose(out, y)
    assert not lin._forward_hooks
