"""Property test of the mixed cos/sin-table vs rotation layout class (issue 29, RoPE).

Generated: head dims, thetas, positions, which table layout (half-split ``cat(f, f)`` or
interleaved ``repeat_interleave(f, 2)``) is applied with which rotation (rotate-half or
interleaved pairs), and whether the candidate's q/k rows are in the reference's order or in
the interleaved order of the conversion's q/k permutation (a Meta-style model next to an HF
reference). A mixed pair must be ``rope.layout_mismatch`` naming the mix (and the
permutation); a consistent pair (the clean twin) must not. Cheap: plain tensors through the
check's own ``_mixed_layout``.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from porting_kit.checks.rope import _mixed_layout  # noqa: E402
from porting_kit.probes.rotary import default_inv_freq, layout_permutation  # noqa: E402
from porting_kit.probes.tolerance import ROPE_TOLERANCES  # noqa: E402
from porting_kit.report.findings import Where  # noqa: E402

TOL = ROPE_TOLERANCES["float32"]


def _apply(x, theta, table: str, rotation: str):
    c, s = torch.cos(theta), torch.sin(theta)
    if table == "half":
        cos, sin = torch.cat((c, c), -1), torch.cat((s, s), -1)
    else:
        cos, sin = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
    h = x.shape[-1] // 2
    if rotation == "half":
        turn = torch.cat((-x[..., h:], x[..., :h]), -1)
    else:
        turn = torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
    return x * cos + turn * sin


@st.composite
def rope_case(draw):
    head_dim = draw(st.sampled_from([8, 16, 32, 64]))
    theta_base = draw(st.sampled_from([1e4, 5e5, 1e6]))
    positions = draw(st.integers(6, 24))
    table = draw(st.sampled_from(["half", "interleaved"]))
    rotation = draw(st.sampled_from(["half", "interleaved"]))
    permuted = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return head_dim, theta_base, positions, table, rotation, permuted, seed


def _probe(head_dim, theta_base, positions, table, rotation, permuted, seed):
    g = torch.Generator().manual_seed(seed)
    theta = torch.arange(positions, dtype=torch.float64)[:, None] * default_inv_freq(theta_base, head_dim)[None]
    q_pre = torch.randn(1, 2, positions, head_dim, generator=g, dtype=torch.float64)
    k_pre = torch.randn(1, 1, positions, head_dim, generator=g, dtype=torch.float64)
    perm = layout_permutation(head_dim)
    own = (lambda x: x[..., perm]) if permuted else (lambda x: x)
    return types.SimpleNamespace(q_pre=q_pre, k_pre=k_pre, theta_ref=theta, scale_ref=1.0, cand_site="attn",
                                 q_post=_apply(own(q_pre), theta, table, rotation),
                                 k_post=_apply(own(k_pre), theta, table, rotation))


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(rope_case())
def test_a_mixed_table_and_rotation_is_layout_mismatch_and_a_consistent_one_is_not(case):
    head_dim, theta_base, positions, table, rotation, permuted, seed = case
    f = _mixed_layout(_probe(*case), TOL, Where(), "test")
    if table == rotation:
        assert f is None  # the clean twin: a consistent rotation is no mix
        return
    assert f is not None and f.code == "rope.layout_mismatch"
    assert f.evidence["hypothesis"] == f"{table}_table_{rotation}_rotation"
    assert f.evidence["through_qk_permutation"] is permuted
    assert f.evidence["hypothesis_residual"] < 1e-9
