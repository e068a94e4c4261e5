"""The real pair examples/llama_meta.py: HF LlamaForCausalLM vs Meta's llama-models Transformer."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fairscale")
pytest.importorskip("llama_models")

from porting_kit.spec import load_spec  # noqa: E402

SPEC = Path(__file__).resolve().parents[2] / "examples" / "llama_meta.py"
_REFERENCE: dict[str, tuple] = {}


def _max_diff(variant=None) -> float:
    spec = load_spec(SPEC, variant=variant)
    if "model" not in _REFERENCE:  # the reference is the same for every variant
        ref = spec.call("reference")
        inputs = spec.call("inputs")
        with torch.no_grad():
            _REFERENCE["model"] = (ref, spec.call("run_reference", ref, inputs))
    ref, ref_logits = _REFERENCE["model"]
    cand = spec.call("candidate")
    converted = spec.call("convert_weights", ref.state_dict())
    assert set(converted) == set(cand.state_dict())  # every Meta weight is set
    cand.load_state_dict(converted, strict=True)
    with torch.no_grad():
        logits = spec.call("run_candidate", cand, spec.call("inputs"))
    assert logits.shape == ref_logits.shape == (1, 64, 512)
    return float((logits - ref_logits).abs().max())


def test_clean_conversion_matches():
    assert _max_diff() < 1e-5


def test_without_the_qk_permutation_the_pair_differs():
    assert _max_diff("no_permutation") > 1e-3


@pytest.mark.parametrize("variant", ["theta", "eps", "scaling"])
def test_candidate_side_faults_change_the_logits(variant):
    assert _max_diff(variant) > 1e-4


def test_unpermute_inverts_transformers_permutation():
    spec = load_spec(SPEC)
    n_heads, head_dim, dim = 2, 8, 3
    meta = torch.arange(n_heads * head_dim * dim, dtype=torch.float32).reshape(-1, dim)
    # transformers' convert_llama_weights_to_hf.py permute: interleaved -> rotate-half rows
    hf = meta.view(n_heads, head_dim // 2, 2, dim).transpose(1, 2).reshape(-1, dim)
    assert not torch.equal(hf, meta)
    assert torch.equal(spec.module.unpermute_rotary(hf, n_heads), meta)


def test_configs_expose_both_sides():
    theta = load_spec(SPEC, variant="theta")
    assert theta.call("reference_config")["rope_parameters"]["rope_theta"] == 5e5
    assert theta.call("candidate_config")["rope_theta"] == 10000.0
    eps = load_spec(SPEC, variant="eps")
    assert eps.call("reference_config")["rms_norm_eps"] == 1e-5
    assert eps.call("candidate_config")["norm_eps"] == 1e-6
    scaling = load_spec(SPEC, variant="scaling")
    assert scaling.call("reference_config")["rope_parameters"]["rope_type"] == "llama3"
    assert scaling.call("candidate_config")["use_scaled_rope"] is False
