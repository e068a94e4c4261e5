"""Decode family: teacher-forced decode steps, planted decode-only faults (fast tiny spec, slow Llama pair)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit import run_check  # noqa: E402
from porting_kit.spec import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "specs" / "decode_tiny.py"
LLAMA = ROOT / "examples" / "llama_meta.py"


def _decode(spec_path, variant=None):
    report = run_check(load_spec(spec_path, variant=variant), only="decode")
    return report, {f.code: f for f in report.findings}


def test_clean_tiny_pair_passes_every_step():
    report, by = _decode(TINY)
    assert list(by) == ["decode.ok"]
    assert by["decode.ok"].evidence["steps"] == 6
    assert by["decode.ok"].evidence["candidate_mode"] == "spec_step"
    assert by["decode.ok"].evidence["reference_mode"] == "past_key_values"
    assert report.exit_code == 0


def test_position_zero_in_decode_is_position_offset():
    report, by = _decode(TINY, "position")
    fd, po = by["decode.first_divergence"], by["decode.position_offset"]
    assert fd.evidence["step"] == 1 and fd.evidence["start_pos"] == 12
    # the candidate's own rotary module computes cos/sin for the wrong position
    assert (fd.where.reference, fd.where.candidate) == ("model.rotary_emb", "model.rotary_emb")
    assert po.evidence["position"] == 0 and po.evidence["offset"] == -12
    assert po.evidence["hypothesis_rel_err"] < 1e-5
    assert "decode.kv_cache" not in by
    assert report.exit_code == 1


def test_cache_one_short_is_kv_cache():
    _, by = _decode(TINY, "kv_short")
    assert by["decode.first_divergence"].evidence["step"] == 1
    assert by["decode.first_divergence"].where.reference == "model.layers.0.self_attn"
    kv = by["decode.kv_cache"]
    assert kv.evidence["cache_tokens_seen"] == 11 and kv.evidence["hypothesis_rel_err"] < 1e-5
    assert "decode.position_offset" not in by


def test_decode_only_mlp_fault_is_located_by_step_and_module():
    _, by = _decode(TINY, "mlp_decode")
    fd = by["decode.first_divergence"]
    assert fd.evidence["step"] == 1
    assert (fd.where.reference, fd.where.candidate) == ("model.layers.1.mlp", "model.layers.1.mlp")
    assert fd.evidence["input_already_differs"] is False
    assert "decode.position_offset" not in by and "decode.kv_cache" not in by


def test_spec_without_a_way_to_step_is_skipped(tmp_path):
    spec = tmp_path / "nostep.py"
    spec.write_text("import torch\n"
                    "def reference():\n    torch.manual_seed(0)\n    return torch.nn.Embedding(8, 4)\n"
                    "def candidate():\n    return torch.nn.Embedding(8, 4)\n"
                    "def inputs():\n    return {'input': torch.tensor([[1, 2]])}\n")
    report = run_check(str(spec), only="decode")
    (f,) = report.findings
    assert f.code == "decode.skipped" and f.status == "skip"
    assert "_step(model, tokens, start_pos)" in f.message


@pytest.mark.slow
@pytest.mark.parametrize("variant,code", [(None, "decode.ok"), ("decode_position", "decode.position_offset"),
                                          ("decode_kv_stale", "decode.kv_cache")])
def test_llama_pair_decode(variant, code):
    pytest.importorskip("llama_models")
    pytest.importorskip("fairscale")
    _, by = _decode(LLAMA, variant)
    assert code in by
    if variant is None:
        assert list(by) == ["decode.ok"] and by[code].evidence["steps"] == 16
        return
    fd = by["decode.first_divergence"]
    assert fd.evidence["step"] == 1 and fd.evidence["start_pos"] == 64
    assert (fd.where.reference, fd.where.candidate) == ("model.layers.0.self_attn", "layers.0.attention")
    if variant == "decode_position":
        assert by[code].evidence["position"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("variant,code", [(None, "decode.ok"), ("decode_position", "decode.position_offset"),
                                          ("decode_kv_stale", "decode.kv_cache")])
def test_embedded_tts_decode(variant, code):
    report = run_check(example="tts" if variant is None else f"tts:{variant}", only="decode")
    by = {f.code: f for f in report.findings}
    assert code in by
    if variant is None:
        assert list(by) == ["decode.ok"] and by[code].evidence["steps"] == 16
        return
    fd = by["decode.first_divergence"]
    assert fd.evidence["step"] == 1 and fd.evidence["start_pos"] == 64
    assert (fd.where.reference, fd.where.candidate) == ("lm.model.layers.0.self_attn", "talker.layers.0.attn")
