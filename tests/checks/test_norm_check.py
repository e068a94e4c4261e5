"""The norm family on the embedded example's planted faults, the real Llama pair and an
unexplained norm; rope stays quiet on every norm fault."""

import functools
import types
from pathlib import Path

import pytest

from porting_kit.runner import run_check
from porting_kit.spec import Spec, load_spec

LLAMA = str(Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py")


@functools.cache
def report(example):
    return run_check(example=example, only="rope,norm")


def norm(r, code=None):
    fs = [f for f in r.findings if f.check == "norm"]
    if code is None:
        assert len(fs) == 1, [f.code for f in fs]
        return fs[0]
    (f,) = [f for f in fs if f.code == code]
    return f


def rope_quiet(r):
    return [f.code for f in r.findings if f.check == "rope"] == ["rope.ok"]


def test_eps_mismatch_reports_both_eps():
    r = report("tts:norm_eps")
    f = norm(r)
    assert (f.code, f.status) == ("norm.eps_mismatch", "fail")
    assert (f.evidence["reference_eps"], f.evidence["candidate_eps"]) == (1e-6, 1e-5)
    assert f.where.reference == "lm.model.layers.0.input_layernorm"
    assert f.where.candidate == "talker.layers.0.input_layernorm"
    assert f.evidence["pairs_affected"] == f.evidence["pairs_compared"] == 9
    assert rope_quiet(r)


def test_kind_mismatch():
    r = report("tts:norm_layernorm")
    f = norm(r)
    assert (f.code, f.status) == ("norm.kind_mismatch", "fail")
    assert (f.evidence["reference_kind"], f.evidence["candidate_kind"]) == ("rms", "layer")
    assert f.evidence["candidate_layer_fit_residual"] < 1e-5 < f.evidence["candidate_rms_fit_residual"]
    assert rope_quiet(r)


def test_weight_offset():
    r = report("tts:norm_weight_offset")
    f = norm(r)
    assert (f.code, f.status) == ("norm.weight_offset", "fail")
    assert f.evidence["candidate_weight_form"] == "(1 + w)"
    assert f.evidence["offset_fit_rel_diff"] < 1e-5
    assert rope_quiet(r)


def test_no_fp32_upcast_only_in_bf16():
    r = report("tts:norm_no_fp32_upcast")
    f = norm(r)
    assert (f.code, f.status) == ("norm.no_fp32_upcast", "fail")
    assert f.evidence["candidate_bf16_rel_error"] > 2.5 * f.evidence["reference_bf16_rel_error"]
    assert rope_quiet(r)  # float32 forward: identical q/k


def test_placement():
    r = report("tts:norm_post")
    f = norm(r)
    assert (f.code, f.status) == ("norm.placement", "fail")
    assert (f.evidence["reference_placement"], f.evidence["candidate_placement"]) == ("pre", "post")
    assert (f.where.reference, f.where.candidate) == ("lm.model.layers.0", "talker.layers.0")
    assert rope_quiet(r)


def test_missing_qk_norm():
    r = report("tts:norm_no_qk_norm")
    f = norm(r)
    assert (f.code, f.status) == ("norm.missing_qk_norm", "fail")
    assert f.evidence["head_dim"] == 16
    assert f.evidence["reference_qk_norms"] == 4  # q_norm and k_norm in each of 2 layers
    assert rope_quiet(r)


def test_rope_faults_give_no_norm_finding():
    r = report("tts:rope_theta_default")
    assert norm(r).code == "norm.ok"


def test_unexplained_norm_shows_numbers():
    """Hidden-size norms replaced by x / mean|x| (an L1 norm): no known hypothesis fits."""
    import torch

    base = load_spec(example="tts").module
    mod = types.ModuleType("norm_unexplained")
    for attr in ("reference", "inputs", "run_reference", "run_candidate"):
        setattr(mod, attr, getattr(base, attr))

    def candidate():
        base.VARIANT = None
        model = base.candidate()
        for name, m in model.named_modules():
            if name.endswith("input_layernorm"):
                m.forward = lambda x, m=m: m.weight * x / (x.abs().mean(-1, keepdim=True) + 1e-6)
        return model

    mod.candidate = candidate
    r = run_check(Spec(module=mod, name="test:norm_unexplained"), only="norm")
    f = norm(r)
    assert (f.code, f.status) == ("norm.unexplained", "fail")
    assert f.evidence["candidate_kind"] == "unknown"
    assert min(f.evidence["candidate_rms_fit_residual"], f.evidence["candidate_layer_fit_residual"]) > 1e-3
    assert f.evidence["pairs_affected"] == 2
    del torch


def test_llama_eps():
    if not Path(LLAMA).exists():
        pytest.fail("examples/llama_meta.py is missing")
    r = run_check(load_spec(LLAMA, variant="eps"), only="rope,norm")
    f = norm(r)
    assert f.code == "norm.eps_mismatch"
    assert (f.evidence["reference_eps"], f.evidence["candidate_eps"]) == (1e-5, 1e-6)
    assert f.where.candidate == "layers.0.attention_norm"
    assert rope_quiet(r)
