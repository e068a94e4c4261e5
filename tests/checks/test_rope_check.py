"""The rope family on the embedded example's planted faults, the real Meta-vs-HF Llama pair,
an unexplained fault, and the JSON report."""

import functools
import json
import types
from pathlib import Path

import pytest

from porting_kit.runner import run_check
from porting_kit.spec import Spec, load_spec

LLAMA = str(Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py")


@functools.cache
def report(example=None, path=None, variant=None, only="rope,norm"):
    spec = load_spec(path, variant=variant) if path else load_spec(example=example)
    return run_check(spec, only=only)


def rope(r):
    (f,) = [f for f in r.findings if f.check == "rope"]
    return f


def no_fault(r, family):
    return [f.code for f in r.findings if f.check == family and f.status in ("fail", "warn")] == []


def test_clean_example_has_no_rope_norm_config_finding():
    r = report(example="tts", only="config,rope,norm")
    assert r.codes() == ["config.ok", "rope.ok", "norm.ok"]
    # the screen: q/k equal the reference's, so no pairing/angle fit runs
    assert rope(r).evidence["qk_relative_residual"] < 1e-5


def test_inv_freq_uninitialized():
    r = report(example="tts:rope_inv_freq_uninitialized")
    f = rope(r)
    assert (f.code, f.status) == ("rope.inv_freq_uninitialized", "fail")
    assert f.where.candidate.endswith("rotary_emb")
    assert f.evidence["reference_inv_freq_head"][:2] == pytest.approx([1.0, 0.177828], rel=1e-5)
    assert "recompute" in f.hint.lower()


def test_theta_mismatch_reports_both_bases():
    f = rope(report(example="tts:rope_theta_default"))
    assert (f.code, f.status) == ("rope.theta_mismatch", "fail")
    assert f.evidence["reference_rope_theta"] == 1e6
    assert f.evidence["candidate_rope_theta"] == 1e4
    assert "rope_theta=10000; the reference uses 1000000" in f.message
    assert f.where.reference == "lm.model.rotary_emb"


def test_layout_mismatch():
    f = rope(report(example="tts:rope_interleaved"))
    assert (f.code, f.status) == ("rope.layout_mismatch", "fail")
    assert f.evidence["candidate_layout"] == "interleaved"
    assert f.evidence["reference_structure_residual"] > 0.1
    assert f.evidence["structure_residual"] < 1e-5


def test_partial_rotary():
    f = rope(report(example="tts:rope_partial"))
    assert (f.code, f.status) == ("rope.partial_rotary_mismatch", "fail")
    assert (f.evidence["reference_rotary_dim"], f.evidence["candidate_rotary_dim"]) == (16, 8)


def test_position_offset():
    f = rope(report(example="tts:rope_position_offset"))
    assert (f.code, f.status) == ("rope.position_offset", "fail")
    assert f.evidence["offset"] == 3
    assert f.evidence["offset_q"] == 3  # the port shifts the query positions only
    assert f.evidence["offset_k"] == 0


def test_scaling_ignored():
    f = rope(report(example="tts:rope_scaling_ignored"))
    assert (f.code, f.status) == ("rope.scaling_ignored", "fail")
    assert f.evidence["reference_rope_type"] == "linear"
    assert f.evidence["scaling_factor"] == 4.0


def test_low_precision_error_grows_with_position():
    f = rope(report(example="tts:rope_low_precision"))
    assert (f.code, f.status) == ("rope.low_precision", "fail")
    pos, err = f.evidence["error_positions"], f.evidence["error_rad"]
    assert pos[0] == 0 and pos[-1] == 63 and len(err) == len(pos) <= 8
    assert err[0] == 0.0  # the rotation is the identity at position 0
    assert max(err[-3:]) > 5 * max(err[1], 1e-6)


def test_rope_variants_raise_no_norm_finding():
    for v in ("rope_theta_default", "rope_interleaved", "rope_partial", "rope_position_offset",
              "rope_scaling_ignored", "rope_low_precision", "rope_inv_freq_uninitialized"):
        assert no_fault(report(example=f"tts:{v}"), "norm"), v


def test_upstream_fault_is_not_called_rope():
    """Fused qkv shards swapped: q/k differ before RoPE, so the rope family passes (parity locates it)."""
    f = rope(report(example="tts:qkv_shard_order", only="rope"))
    assert f.code == "rope.ok"
    assert f.evidence["qk_norm_spread"] > 0.05


def _llama(variant=None):
    if not Path(LLAMA).exists():
        pytest.fail("examples/llama_meta.py is missing")
    return report(path=LLAMA, variant=variant, only="config,rope,norm")


def test_llama_clean_pair_no_rope_finding():
    r = _llama()
    assert no_fault(r, "rope") and no_fault(r, "norm") and no_fault(r, "config")
    assert "through the q/k permutation" in rope(r).message


def test_llama_missing_permutation_is_layout():
    f = rope(_llama("no_permutation"))
    assert (f.code, f.status) == ("rope.layout_mismatch", "fail")
    assert f.where.candidate == "layers.0.attention"


def test_llama_half_split_tables_on_the_interleaved_model_are_layout_mismatch():
    """The field class: an interleaved-rotation (Meta) model whose port precomputes HF-layout
    cos/sin tables; its q/k rows are in the interleaved order of the conversion's permutation."""
    f = rope(_llama("rope_half_table"))
    assert (f.code, f.status) == ("rope.layout_mismatch", "fail")
    assert f.evidence["hypothesis"] == "half_table_interleaved_rotation"
    assert f.evidence["through_qk_permutation"] is True
    assert f.evidence["hypothesis_residual"] < 1e-5


def test_llama_theta():
    f = rope(_llama("theta"))
    assert f.code == "rope.theta_mismatch"
    assert (f.evidence["reference_rope_theta"], f.evidence["candidate_rope_theta"]) == (5e5, 1e4)


def test_llama_scaling():
    f = rope(_llama("scaling"))
    assert f.code == "rope.scaling_ignored"
    assert f.evidence["reference_rope_type"] == "llama3"


def _patched_spec(patch, name):
    """The clean embedded example with the candidate modified by ``patch(model)``."""
    base = load_spec(example="tts").module
    mod = types.ModuleType(name)
    for attr in ("reference", "inputs", "run_reference", "run_candidate"):
        setattr(mod, attr, getattr(base, attr))

    def candidate():
        base.VARIANT = None
        return patch(base.candidate())

    mod.candidate = candidate
    return Spec(module=mod, name=f"test:{name}")


def test_unexplained_rotation_is_not_given_a_confident_name():
    """Angles growing as position**1.3: no known fault fits, the numbers are shown."""
    import torch

    def patch(model):
        for m in model.modules():
            if hasattr(m, "cos_sin"):
                def cos_sin(positions, m=m):
                    freqs = positions[..., None].double() ** 1.3 * m.inv_freq.double()
                    return freqs.cos().float(), freqs.sin().float()
                m.cos_sin = cos_sin
        return model

    r = run_check(_patched_spec(patch, "rope_unexplained"), only="rope")
    f = rope(r)
    assert (f.code, f.status) == ("rope.unexplained", "fail")
    assert f.evidence["angle_error_rad"] > 0.5
    assert f.evidence["theta_fit_error_rad"] > 1e-2
    assert f.evidence["best_offset_error_rad"] > 1e-2
    del torch


def test_json_report_carries_evidence_and_hint(tmp_path):
    from porting_kit.cli import main

    out = tmp_path / "r.json"
    rc = main(["check", "--example", "tts:rope_theta_default", "--only", "config,parity,rope",
               "--json", str(out)])
    assert rc == 1
    data = json.loads(out.read_text())
    by = {f["code"]: f for f in data["findings"]}
    assert by["rope.theta_mismatch"]["evidence"]["candidate_rope_theta"] == 10000.0
    assert "rope_parameters" in by["rope.theta_mismatch"]["hint"]
    assert by["config.mismatch"]["evidence"]["key"] == "rope_theta"
    assert by["rope.theta_mismatch"]["where"]["candidate"] == "talker.layers.0.attn.rotary_emb"
    # the diagnosis accompanies the first divergence, it does not replace it
    fd = data["first_divergence"]
    assert fd is not None and "parity.first_divergence" in by
    assert by["rope.theta_mismatch"]["evidence"]["first_divergence"] == (
        f"{fd['reference_module']} ~ {fd['candidate_module']}")


def _site(inv_freq, dtype="float32"):
    from porting_kit.locate import RotarySite

    return RotarySite("rot.inv_freq", "inv_freq", inv_freq, dtype, None)


def test_static_fallback_compares_tables():
    """Without an attention call to capture, the stored tables are compared."""
    import torch

    from porting_kit.checks.rope import _static_diagnosis
    from porting_kit.report.findings import Where
    from porting_kit.probes.rotary import default_inv_freq

    ref = [_site(default_inv_freq(1e6, 16))]
    why = "no attention call seen"
    f = _static_diagnosis(ref, [_site(default_inv_freq(1e4, 16))], Where(), why)
    assert f.code == "rope.theta_mismatch"
    assert (f.evidence["reference_rope_theta"], f.evidence["candidate_rope_theta"]) == (1e6, 1e4)
    assert _static_diagnosis(ref, [_site(default_inv_freq(1e6, 8))], Where(), why).code == \
        "rope.partial_rotary_mismatch"
    assert _static_diagnosis(ref, [_site(default_inv_freq(1e6, 16))], Where(), why).code == "rope.ok"
    bf16 = default_inv_freq(1e6, 16).to(torch.bfloat16).double()
    assert _static_diagnosis(ref, [_site(bf16, "bfloat16")], Where(), why).code == "rope.low_precision"
    assert _static_diagnosis(ref, [], Where(), why).code == "rope.skipped"


@pytest.mark.slow
def test_softmax_scale_folded_into_q_is_not_a_rope_fault(monkeypatch):
    """A clean port that multiplies q by 1/sqrt(head_dim) and calls SDPA with scale=1 (a fresh
    user's false alarm, `rope.unexplained`): a factor on q alone is the softmax scale moved,
    not an attention scaling (that multiplies cos and sin, so q and k alike)."""
    import types

    import torch.nn.functional as F

    from porting_kit.embedded import tts_port
    from porting_kit.runner import run_check

    def prescaled(q, k, v, *args, scale=None, **kwargs):
        return F.scaled_dot_product_attention(q * scale, k, v, *args, scale=1.0, **kwargs)

    patched = types.SimpleNamespace(**{**vars(F), "scaled_dot_product_attention": prescaled})
    monkeypatch.setattr(tts_port, "F", patched)
    rep = run_check(example="tts", only="parity,rope")
    (rope,) = [f for f in rep.findings if f.check == "rope"]
    assert rope.code == "rope.ok", rope.message
    assert rep.status == "pass"
    # q/k differ by the factor, so the screen fails and the full fit decides
    assert "angle_error_rad" in rope.evidence and "qk_relative_residual" not in rope.evidence
