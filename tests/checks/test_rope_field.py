"""RoPE field faults (issue 17, point 1): mixed cos/sin vs rotation layouts, partial rotary by
zero padding."""

import pytest
import torch

from porting_kit.checks.rope import padding_finding
from porting_kit.embedded.tts_port import RotaryEmbedding
from porting_kit.locate import RotarySite
from porting_kit.probes.rotary import default_inv_freq, mixed_layout_residuals, padded_table, rotate
from porting_kit.report.findings import Where
from porting_kit.runner import run_check


def _rope(variant):
    rep = run_check(example=f"tts:{variant}", only="parity,rope")
    return [f for f in rep.findings if f.check == "rope"]


@pytest.mark.parametrize("variant, hypothesis", [
    ("rope_table_half_rot_interleaved", "half_table_interleaved_rotation"),
    ("rope_table_interleaved_rot_half", "interleaved_table_half_rotation"),
])
def test_mixed_layouts_are_layout_mismatch_both_directions(variant, hypothesis):
    (f,) = _rope(variant)
    assert f.code == "rope.layout_mismatch"
    assert f.evidence["hypothesis"] == hypothesis
    assert f.evidence["hypothesis_residual"] < 1e-5
    other = [k for k in f.evidence if k.startswith("residual_") and hypothesis not in k]
    assert f.evidence[other[0]] > 0.1


def test_padded_port_with_another_fraction_is_partial_rotary_mismatch():
    (f,) = _rope("rope_padded_half")
    assert f.code == "rope.partial_rotary_mismatch"
    assert (f.evidence["candidate_rotary_fraction"], f.evidence["reference_rotary_fraction"]) == (0.5, 1.0)


@pytest.mark.parametrize("neox, table", [(True, "half"), (False, "interleaved")])
def test_consistent_full_width_table_is_the_clean_rotation(neox, table):
    """Clean twin: a full-width cos/sin applied with its own layout's rotation is plain RoPE."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    pos = torch.arange(5).expand(2, 5)
    plain = RotaryEmbedding(16, 16, 64, 1e4, is_neox_style=neox)
    full = RotaryEmbedding(16, 16, 64, 1e4, is_neox_style=neox, table_layout=table)
    for a, b in zip(plain(pos, q, k), full(pos, q, k)):
        torch.testing.assert_close(a, b)


def test_mixed_residuals_reject_a_consistent_rotation():
    torch.manual_seed(0)
    pre = torch.randn(1, 2, 6, 16, dtype=torch.float64)
    theta = torch.arange(6, dtype=torch.float64)[:, None] * default_inv_freq(1e4, 16)[None]
    res = mixed_layout_residuals(pre, rotate(pre, theta), theta)
    assert min(res.values()) > 0.05


def _site(values):
    return RotarySite("rotary_emb.inv_freq", "inv_freq", torch.tensor(values, dtype=torch.float64),
                      "float32")


def test_padded_table_is_a_regular_block_of_zeros_only():
    w = default_inv_freq(1e4, 8)
    assert padded_table(torch.cat([w, torch.zeros(4, dtype=torch.float64)])).fraction == 0.5
    assert padded_table(torch.zeros(8)) is None  # all zeros: garbage, not padding
    assert padded_table(torch.tensor([1.0, 0.0, 0.1, 0.0])) is None  # scattered zeros
    assert padded_table(w) is None  # no zeros: not padded


def test_padded_port_with_the_reference_fraction_passes_the_static_step():
    w = default_inv_freq(1e4, 8).tolist()  # 4 rotating pairs
    cand = _site(w + [0.0] * 4)  # padded to 8 pairs: fraction 0.5
    assert padding_finding([_site(w)], cand, Where()) is None  # reference rotates 4 pairs too
    f = padding_finding([_site(default_inv_freq(1e4, 16).tolist())], cand, Where())
    assert f.code == "rope.partial_rotary_mismatch"
    assert (f.evidence["candidate_rotary_fraction"], f.evidence["reference_rotary_fraction"]) == (0.5, 1.0)
