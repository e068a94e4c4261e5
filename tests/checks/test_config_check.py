"""Static config parity: canonical keys from HF configs, Meta ModelArgs and spec dicts."""

import dataclasses
import types

import pytest

from porting_kit.checks.config import as_dict, canonical
from porting_kit.runner import run_check
from porting_kit.spec import Spec


def test_transformers5_rope_parameters_win():
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 4.0})
    c = canonical(as_dict(cfg), "model.config")
    assert c["rope_theta"] == (5e5, "model.config['rope_parameters']['rope_theta']")
    assert c["rope_type"][0] == "linear"
    assert c["rope_factor"][0] == 4.0
    assert c["norm_eps"] == (1e-5, "model.config['rms_norm_eps']")
    assert c["head_dim"][0] == 16


def test_meta_model_args():
    @dataclasses.dataclass
    class ModelArgs:  # the fields of llama_models' ModelArgs that matter here
        dim: int = 128
        n_heads: int = 8
        norm_eps: float = 1e-6
        rope_theta: float = 10000.0
        use_scaled_rope: bool = False

    c = canonical(as_dict(ModelArgs()), "candidate.params")
    assert c["rope_theta"] == (10000.0, "candidate.params['rope_theta']")
    assert c["rope_type"] == ("default", "candidate.params['use_scaled_rope']")
    assert c["norm_eps"][0] == 1e-6
    assert c["head_dim"] == (16, "candidate.params['dim'] // ['n_heads']")


def _spec(ref: dict, cand: dict) -> Spec:
    mod = types.ModuleType("cfg_spec")
    mod.reference_config = lambda: ref
    mod.candidate_config = lambda: cand
    mod.synthesize_candidate = lambda text, seed: None  # a valid spec without the parity trio
    return Spec(module=mod, name="test:cfg")


def test_mismatch_names_key_values_and_sources():
    ref = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "rms_norm_eps": 1e-6,
           "head_dim": 16}
    cand = {"rope_theta": 10000.0, "rms_norm_eps": 1e-6, "head_dim": 16}
    r = run_check(_spec(ref, cand), only="config")
    (f,) = r.findings
    assert (f.code, f.status) == ("config.mismatch", "fail")
    assert f.evidence == {"key": "rope_theta", "reference_value": 1e6, "candidate_value": 10000.0,
                          "reference_source": "reference_config()['rope_parameters']['rope_theta']",
                          "candidate_source": "candidate_config()['rope_theta']"}
    assert r.exit_code == 1


def test_agreeing_configs_pass_and_missing_side_skips():
    same = {"rope_theta": 1e4, "norm_eps": 1e-5, "head_dim": 64}
    assert run_check(_spec(same, dict(same)), only="config").codes() == ["config.ok"]
    mod = types.ModuleType("half")
    mod.reference_config = lambda: same
    mod.synthesize_candidate = lambda text, seed: None
    assert run_check(Spec(module=mod, name="t"), only="config").codes() == ["config.skipped"]


@pytest.mark.parametrize("variant,key,ref,cand", [
    ("rope_theta_default", "rope_theta", 1e6, 1e4),
    ("rope_scaling_ignored", "rope_type", "linear", "default"),
    ("rope_partial", "rotary_dim", 16, 8),
    ("norm_eps", "norm_eps", 1e-6, 1e-5),
])
def test_embedded_variants(variant, key, ref, cand):
    r = run_check(example=f"tts:{variant}", only="config")
    (f,) = r.findings
    assert f.code == "config.mismatch"
    assert (f.evidence["key"], f.evidence["reference_value"], f.evidence["candidate_value"]) == (key, ref, cand)


def test_embedded_clean():
    assert run_check(example="tts", only="config").codes() == ["config.ok"]
