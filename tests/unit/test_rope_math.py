"""Unit tests of the RoPE probe functions (porting_kit.probes.rotary): the math, discovery, measurement."""

import math

import pytest
import torch

from porting_kit.locate import find_rotary
from porting_kit.probes.rotary import (
    HALF,
    INTERLEAVED,
    Structure,
    default_inv_freq,
    fit_base,
    fit_frequencies,
    garbage_reason,
    layout_permutation,
    measure_rotation,
    rotate,
    undo_reference_rotation,
    wrap,
)


def test_inv_freq_head_dim_64_base_1e4():
    w = default_inv_freq(10000.0, 64)
    assert w.shape == (32,)
    expected = [1.0, 0.749894, 0.562341, 0.421696, 0.316228]
    assert w[:5].tolist() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("base", [1e4, 5e5, 1e6])
def test_fit_base_recovers_base(base):
    b, res = fit_base(default_inv_freq(base, 16).float())
    assert b == pytest.approx(base, rel=1e-4)
    assert res < 1e-5


def test_garbage_reason():
    good = default_inv_freq(1e6, 16)
    assert garbage_reason(good) is None
    assert "NaN" in garbage_reason(torch.tensor([1.0, float("nan"), 0.1]))
    assert "zero" in garbage_reason(torch.tensor([1.0, 0.0, 0.1]))
    assert "not decreasing" in garbage_reason(torch.tensor([1.0, 0.1, 0.5]))
    assert "> 1" in garbage_reason(torch.tensor([3e7, 0.1, 0.01]))
    assert "3 of 3 values are NaN/Inf" == garbage_reason(torch.full((3,), float("nan"), dtype=torch.bfloat16))
    assert "empty" in garbage_reason(torch.tensor([]))  # no frequency at all cannot be a table


def _qk(seed=0, b=1, h=4, t=24, d=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, t, d, generator=g, dtype=torch.float64)


def test_permutation_makes_layouts_equal():
    """Interleaved RoPE on permuted rows == permuted rotate-half RoPE (the Llama conversion)."""
    x = _qk()
    theta = torch.arange(24, dtype=torch.float64)[:, None] * default_inv_freq(1e4, 16)[None]
    perm = layout_permutation(16)
    assert perm[:4].tolist() == [0, 8, 1, 9]
    a = rotate(x[..., perm], theta, INTERLEAVED)
    b = rotate(x, theta, HALF)[..., perm]
    torch.testing.assert_close(a, b)
    # and without the permutation they differ (beyond position 0, where rotation is the identity)
    c = rotate(x, theta, INTERLEAVED)
    assert torch.equal(c[..., 0, :], x[..., 0, :])
    assert (c[..., 1:, :] - rotate(x, theta, HALF)[..., 1:, :]).abs().max() > 0.1


def test_measure_rotation_finds_layout_and_angles():
    x = _qk(1)
    pos = torch.arange(24, dtype=torch.float64)
    w = default_inv_freq(1e4, 16)
    theta = pos[:, None] * w[None]
    y = rotate(x, theta, INTERLEAVED)
    fit_int = measure_rotation(x, y, Structure(INTERLEAVED, False, 16))
    fit_half = measure_rotation(x, y, Structure(HALF, False, 16))
    assert fit_int.residual < 1e-12
    assert fit_half.residual > 0.1
    slope, phase = fit_frequencies(fit_int.theta, pos)
    torch.testing.assert_close(slope, w)
    assert phase.abs().max() < 1e-9


def test_fit_frequencies_sees_offset():
    pos = torch.arange(32, dtype=torch.float64)
    w = default_inv_freq(1e6, 16)
    theta = torch.remainder((pos[:, None] + 3) * w[None] + math.pi, 2 * math.pi) - math.pi
    slope, phase = fit_frequencies(theta, pos)
    torch.testing.assert_close(slope, w)
    assert (phase / w)[:4].tolist() == pytest.approx([3, 3, 3, 3], abs=1e-6)


def test_undo_reference_rotation_roundtrip():
    x = _qk(2)
    pos = torch.arange(24, dtype=torch.float64)
    w = default_inv_freq(1e6, 16)
    emb = torch.cat([pos[:, None] * w, pos[:, None] * w], -1)[None]
    y = rotate(x, pos[:, None] * w[None], HALF)
    pre, theta, scale = undo_reference_rotation(y, emb.cos(), emb.sin())
    torch.testing.assert_close(pre, x)
    torch.testing.assert_close(theta, wrap(pos[:, None] * w[None]))  # angles in (-pi, pi]
    assert scale == pytest.approx(1.0)
    # a rotary module returning cos/sin without the batch axis, (T, rotary_dim)
    pre2, theta2, _ = undo_reference_rotation(y, emb[0].cos(), emb[0].sin())
    torch.testing.assert_close(pre2, x)
    torch.testing.assert_close(theta2, theta)


def test_find_rotary_kinds():
    class HFStyle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", default_inv_freq(1e4, 8).float(), persistent=False)

    class MetaStyle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            t = torch.arange(10, dtype=torch.float32)
            self.freqs_cis = torch.polar(torch.ones(10, 4), torch.outer(t, default_inv_freq(5e5, 8).float()))

    m = torch.nn.Module()
    m.rot = HFStyle()
    meta = MetaStyle()
    (s,) = find_rotary(m)
    assert (s.name, s.kind, s.module_name) == ("rot.inv_freq", "inv_freq", "rot")
    (s2,) = find_rotary(meta)
    assert s2.kind == "freqs_cis"
    torch.testing.assert_close(s2.inv_freq, default_inv_freq(5e5, 8), rtol=1e-6, atol=1e-7)
