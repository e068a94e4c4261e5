"""Property test of the partial-rotary class (issue 29, RoPE): slicing vs zero-padding.

Generated: head dims, the reference's rotary fraction, thetas, positions, and how the
candidate does partial rotary: the reference's way (rotate-half over ``rotary_dim`` dims, the
rest passed through: the clean twin), another fraction by slicing, or the reference's
fraction by zero-padding inv_freq / the cos/sin angles to ``head_dim / 2`` and rotating
half over the full head (pairs ``(i, i + head_dim/2)`` instead of ``(i, i + rotary_dim/2)``,
which used to pass as ``rope.ok``). Faulty forms must be ``rope.partial_rotary_mismatch``; the
clean twin must pass. Cheap: plain tensors through the check's own ``_diagnose``.
"""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from porting_kit.checks.rope import Probe, _diagnose  # noqa: E402
from porting_kit.locate import RotarySite  # noqa: E402
from porting_kit.probes.rotary import HALF, default_inv_freq, rotate  # noqa: E402
from porting_kit.report.findings import Where  # noqa: E402

FORMS = ("clean", "slice_other_fraction", "pad_to_head_dim")


@st.composite
def partial_case(draw):
    head_dim = draw(st.sampled_from([16, 32, 64]))
    frac = draw(st.sampled_from([0.25, 0.5, 0.75]))
    rd = int(head_dim * frac) // 2 * 2
    base = draw(st.sampled_from([1e4, 1e6]))
    form = draw(st.sampled_from(FORMS))
    seed = draw(st.integers(0, 2**16))
    return head_dim, rd, base, form, seed


def _finding(head_dim, rd, base, form, seed, positions=16):
    pos = torch.arange(positions, dtype=torch.float64)
    inv = default_inv_freq(base, rd)
    theta = pos[:, None] * inv[None]
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, positions, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, positions, head_dim, generator=g, dtype=torch.float64)
    cand_inv = inv
    if form == "clean":
        th = theta
    elif form == "slice_other_fraction":
        # another of the fractions ports use (a quarter, a half, three quarters, all)
        other = next(r for r in (head_dim // 2, head_dim // 4, 3 * head_dim // 4, head_dim)
                     if r != rd and r % 2 == 0 and r >= 2)
        cand_inv = default_inv_freq(base, other)
        th = pos[:, None] * cand_inv[None]
    else:  # zero-padded to head_dim / 2, rotate-half over the full head
        cand_inv = torch.cat([inv, torch.zeros(head_dim // 2 - rd // 2, dtype=torch.float64)])
        th = pos[:, None] * cand_inv[None]
    pr = Probe(q_pre=q, k_pre=k, q_post=rotate(q, th, HALF), k_post=rotate(k, th, HALF), theta_ref=theta,
               scale_ref=1.0, positions=pos, head_dim=head_dim, rotary_dim_ref=rd, dtype="float32",
               ref_site="attn", cand_site="attn")
    ctx = types.SimpleNamespace(extras={}, spec=types.SimpleNamespace(get=lambda *a, **kw: None),
                                first_divergence=None, state={})
    ref_site = RotarySite("rotary_emb.inv_freq", "inv_freq", inv, "float32")
    cand_site = RotarySite("rotary_emb.inv_freq", "inv_freq", cand_inv, "float32")
    return _diagnose(pr, ref_site, [cand_site], Where(), ctx)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(partial_case())
def test_partial_rotary_by_slicing_or_padding_is_named_and_the_clean_twin_passes(case):
    head_dim, rd, base, form, seed = case
    if rd < 4 or rd == head_dim:
        return  # one pair, or no partial rotary: nothing to pad
    f = _finding(*case)
    if form == "clean":
        assert f.status != "fail", f.message
    else:
        assert f.code == "rope.partial_rotary_mismatch", f.message
        if form == "pad_to_head_dim":
            assert f.evidence["candidate_pairing_span"] == head_dim
            assert f.evidence["reference_pairing_span"] == rd
