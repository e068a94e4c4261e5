"""Unit tests of porting_kit.probes.compare on hand-built tensors with known figures."""

import math

import pytest
import torch

from porting_kit.probes import compare
from porting_kit.probes.compare import (
    describe_mismatch,
    first_tensor,
    quick_metrics,
    tensor_metrics,
)
from porting_kit.probes.tolerance import DEFAULTS, Tolerance

FP32 = DEFAULTS["float32"]
BF16 = DEFAULTS["bfloat16"]


def test_one_element_off():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    cand = torch.tensor([1.0, 2.0, 3.0, 4.5])
    m = tensor_metrics(ref, cand, FP32)
    assert (m.numel, m.mismatched, m.within_tolerance) == (4, 1, False)
    assert m.max_abs == pytest.approx(0.5) and m.max_abs_index == [3]
    assert m.max_rel == pytest.approx(0.125) and m.max_rel_index == [3]
    assert m.rel_err == pytest.approx(0.5 / math.sqrt(30), rel=1e-12)
    assert m.cosine == pytest.approx(32 / math.sqrt(30 * 34.25), rel=1e-12)
    assert (m.nonfinite_reference, m.nonfinite_candidate) == (0, 0)
    assert m.tolerance == FP32.describe()


def test_identical_tensors():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    m = tensor_metrics(x, x.clone(), FP32)
    assert (m.mismatched, m.max_abs, m.max_rel, m.rel_err) == (0, 0.0, 0.0, 0.0)
    assert m.cosine == pytest.approx(1.0, abs=1e-12)
    assert m.within_tolerance


def test_index_is_given_in_the_tensor_shape():
    ref = torch.ones(2, 3, 4)
    cand = ref.clone()
    cand[1, 2, 0] = 3.0   # abs 2, rel 2
    cand[0, 1, 3] = 2.5   # abs 1.5, rel 1.5
    m = tensor_metrics(ref, cand, FP32)
    assert m.max_abs_index == [1, 2, 0] and m.max_abs == pytest.approx(2.0)
    assert m.max_rel_index == [1, 2, 0]
    assert m.mismatched == 2


def test_greatest_relative_and_absolute_differences_at_different_places():
    ref = torch.tensor([100.0, 0.01])
    cand = torch.tensor([101.0, 0.02])  # abs: 1 and 0.01; rel: 0.01 and 1
    m = tensor_metrics(ref, cand, FP32)
    assert (m.max_abs_index, m.max_rel_index) == ([0], [1])
    assert m.max_abs == pytest.approx(1.0) and m.max_rel == pytest.approx(1.0, rel=1e-5)


def test_elementwise_bound_is_atol_plus_rtol_times_reference():
    tol = Tolerance("float32", rtol=0.1, atol=0.01)
    ref = torch.tensor([1.0, 10.0])
    inside = tensor_metrics(ref, torch.tensor([1.105, 10.0]), tol)   # 0.105 <= 0.11
    outside = tensor_metrics(ref, torch.tensor([1.115, 10.0]), tol)  # 0.115 > 0.11
    assert (inside.mismatched, inside.within_tolerance) == (0, True)
    assert (outside.mismatched, outside.within_tolerance) == (1, False)


def test_nonfinite_elements_are_counted_and_excluded_from_the_figures():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    cand = torch.tensor([1.0, float("nan"), 3.25, float("inf")])
    m = tensor_metrics(ref, cand, FP32)
    assert (m.nonfinite_reference, m.nonfinite_candidate) == (0, 2)
    assert m.mismatched == 3  # two non-finite + one beyond tolerance
    assert m.max_abs == pytest.approx(0.25) and m.max_abs_index == [2]
    # rel_err over the elements finite on both sides: 0.25 / ||(1, 3)||
    assert m.rel_err == pytest.approx(0.25 / math.sqrt(10), rel=1e-12)
    assert not m.within_tolerance


def test_nonfinite_on_both_sides_is_never_within_tolerance():
    ref = torch.tensor([1.0, float("nan")])
    m = tensor_metrics(ref, ref.clone(), FP32)
    assert (m.nonfinite_reference, m.nonfinite_candidate, m.mismatched) == (1, 1, 1)
    assert not m.within_tolerance


def test_tensor_level_tolerance_uses_relative_error():
    ref = torch.ones(100)
    inside = tensor_metrics(ref, ref * 1.01, BF16)   # rel_err 0.01 <= 0.02
    outside = tensor_metrics(ref, ref * 1.03, BF16)  # 0.03 > 0.02
    assert inside.rel_err == pytest.approx(0.01, rel=1e-5) and inside.within_tolerance
    assert outside.rel_err == pytest.approx(0.03, rel=1e-5) and not outside.within_tolerance


def test_zero_reference():
    zero = torch.zeros(4)
    both = tensor_metrics(zero, zero.clone(), FP32)
    assert (both.rel_err, both.cosine, both.within_tolerance) == (0.0, 1.0, True)
    one = tensor_metrics(zero, torch.tensor([0.0, 3.0, 4.0, 0.0]), FP32)
    assert one.rel_err == pytest.approx(5.0)  # absolute norm when ||ref|| == 0
    assert one.cosine == 0.0


def test_dtypes_may_differ():
    ref = torch.tensor([1.0, 2.0, 3.0])
    m = tensor_metrics(ref, ref.to(torch.bfloat16), FP32)
    assert m.mismatched == 0 and m.max_abs == 0.0


def test_chunked_walk_gives_the_unchunked_figures(monkeypatch):
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(4, 5, generator=g)
    cand = ref + 1e-3 * torch.randn(4, 5, generator=g)
    cand[3, 1] += 0.5
    whole = tensor_metrics(ref, cand, FP32)
    monkeypatch.setattr(compare, "_CHUNK", 3)  # 7 chunks, the greatest difference in the 6th
    chunked = tensor_metrics(ref, cand, FP32)
    assert chunked.max_abs_index == whole.max_abs_index == [3, 1]
    assert chunked.max_rel_index == whole.max_rel_index
    assert chunked.mismatched == whole.mismatched == 20
    for name in ("max_abs", "max_rel", "rel_err", "cosine"):
        assert getattr(chunked, name) == pytest.approx(getattr(whole, name), rel=1e-9)


def test_different_element_counts_raise():
    with pytest.raises(ValueError, match="4 elements .* 1"):
        tensor_metrics(torch.ones(4), torch.ones(1), FP32)
    with pytest.raises(ValueError, match="4 elements .* 3"):
        quick_metrics(torch.ones(4), torch.ones(3), FP32)


def test_quick_metrics_on_a_match():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    cand = ref + torch.tensor([0.0, 1e-6, 0.0, -2e-6])
    q = quick_metrics(ref, cand, FP32)
    full = tensor_metrics(ref, cand, FP32)
    assert q is not None and q.within_tolerance and q.mismatched == 0
    assert (q.max_rel, q.cosine, q.max_abs_index) == (None, None, [])
    assert q.max_abs == pytest.approx(full.max_abs, rel=1e-6)
    assert q.rel_err == pytest.approx(full.rel_err, rel=1e-6)


@pytest.mark.parametrize("cand", [
    torch.tensor([1.0, 2.0, 3.0, 4.5]),          # beyond tolerance
    torch.tensor([1.0, float("nan"), 3.0, 4.0]),  # NaN
    torch.tensor([1.0, 2.0, float("inf"), 4.0]),  # Inf
])
def test_quick_metrics_hands_anything_else_to_the_full_path(cand):
    assert quick_metrics(torch.tensor([1.0, 2.0, 3.0, 4.0]), cand, FP32) is None


def test_quick_metrics_tensor_level():
    ref = torch.ones(100)
    assert quick_metrics(ref, ref * 1.01, BF16).rel_err == pytest.approx(0.01, rel=1e-5)
    assert quick_metrics(ref, ref * 1.03, BF16) is None


def test_evidence_is_flat():
    m = tensor_metrics(torch.ones(2, 2), torch.tensor([[1.0, 1.0], [1.0, 2.0]]), FP32)
    ev = m.evidence()
    assert ev["max_abs_index"] == "(1, 1)" and ev["max_rel_index"] == "(1, 1)"
    assert ev["mismatched"] == 1 and ev["max_abs"] == pytest.approx(1.0)
    assert all(isinstance(v, (int, float, str, bool)) for v in ev.values())


def test_describe_mismatch():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0])
    m = tensor_metrics(ref, torch.tensor([1.0, float("nan"), 3.0, 4.5]), FP32)
    text = describe_mismatch(m)
    assert text.startswith("NaN/Inf: 0 in the reference, 1 in the candidate")
    assert "2 / 4 elements differ beyond tolerance" in text
    assert "greatest absolute difference 0.5 at index (3,)" in text
    assert text.endswith(f"({FP32.describe()})")


def test_first_tensor_depth_first():
    a, b = torch.zeros(1), torch.ones(2)
    assert first_tensor(a) is a
    assert first_tensor((None, [3, {"x": a}], b)) is a
    assert first_tensor({"loss": None, "logits": b}) is b
    assert first_tensor([None, 1.0, "text"]) is None
