"""parity.weight_map_inconsistent: a repeated block whose parameters map unlike its siblings'."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from porting_kit import run_check  # noqa: E402
from porting_kit.probes.align import weight_map_outliers  # noqa: E402
from porting_kit.spec import load_spec  # noqa: E402

LLAMA = Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py"


class _Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wk = torch.nn.Linear(2, 2)
        self.wv = torch.nn.Linear(2, 2)


class _Other(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wk = torch.nn.Linear(2, 2)


def _model(kinds):
    m = torch.nn.Module()
    m.layers = torch.nn.ModuleList([_Attn() if k == "a" else _Other() for k in kinds])
    return m


def _map(n, swapped=()):
    wm = {}
    for i in range(n):
        k, v = ("v", "k") if i in swapped else ("k", "v")
        wm[f"layers.{i}.wk.weight"] = [f"model.layers.{i}.attn.{k}_proj.weight"]
        wm[f"layers.{i}.wv.weight"] = [f"model.layers.{i}.attn.{v}_proj.weight"]
    return wm


def test_consistent_blocks_give_nothing():
    assert weight_map_outliers(_map(4), _model("aaaa")) == []


def test_one_swapped_block_among_four_is_named_with_both_tensors():
    out = weight_map_outliers(_map(4, swapped={2}), _model("aaaa"))
    assert [(o.candidate_tensor, o.reference_tensor, o.expected_reference) for o in out] == [
        ("layers.2.wk.weight", "model.layers.2.attn.v_proj.weight", "model.layers.2.attn.k_proj.weight"),
        ("layers.2.wv.weight", "model.layers.2.attn.k_proj.weight", "model.layers.2.attn.v_proj.weight"),
    ]
    assert out[0].siblings == 3 and out[0].blocks == 4 and out[0].block == "layers.2"


def test_two_blocks_tie_is_broken_by_names():
    out = weight_map_outliers(_map(2, swapped={1}), _model("aa"))
    assert {o.candidate_tensor for o in out} == {"layers.1.wk.weight", "layers.1.wv.weight"}


def test_blocks_of_another_class_are_not_siblings():
    wm = _map(2)
    wm["layers.1.wk.weight"] = ["model.layers.1.mamba.in_proj.weight"]  # a hybrid stack
    del wm["layers.1.wv.weight"]
    assert weight_map_outliers(wm, _model("ab")) == []


@pytest.mark.slow
def test_llama_layer1_kv_swap_is_named():
    pytest.importorskip("llama_models")
    pytest.importorskip("fairscale")
    report = run_check(load_spec(LLAMA, variant="kv_swap_layer1"), only="parity")
    (f,) = [f for f in report.findings if f.code == "parity.weight_map_inconsistent"]
    assert f.evidence["block"] == "layers.1" and f.evidence["inconsistent_tensors"] == 2
    assert f.evidence["candidate_tensor"] == "layers.1.attention.wk.weight"
    assert f.evidence["reference_tensor"] == "model.layers.1.self_attn.v_proj.weight"
    assert f.evidence["expected_reference_tensor"] == "model.layers.1.self_attn.k_proj.weight"
    assert (f.where.reference, f.where.candidate) == ("model.layers.1.self_attn.v_proj", "layers.1.attention.wk")
