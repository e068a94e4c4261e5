"""Sampling family on the embedded tts example: the port's sampler vs transformers' processors."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from porting_kit import run_check  # noqa: E402
from porting_kit.errors import InputError  # noqa: E402


def _sampling(variant=None):
    report = run_check(example="tts" if variant is None else f"tts:{variant}", only="sampling")
    return report, {f.code: f for f in report.findings}


def test_clean_port_sampler_matches_transformers():
    report, by = _sampling()
    assert list(by) == ["sampling.ok"]
    assert by["sampling.ok"].evidence["parameter_sets"] == 3 and by["sampling.ok"].evidence["codebooks"] == 4
    assert report.exit_code == 0


@pytest.mark.parametrize("variant,code,key,value", [
    ("sampling_penalty_sign", "sampling.repetition_penalty", "how", "sign"),
    ("sampling_order", "sampling.order", "order", "filters_first"),
    ("sampling_codebook_routing", "sampling.codebook_routing", "routing", "roll+1"),
])
def test_planted_processor_faults_are_named(variant, code, key, value):
    report, by = _sampling(variant)
    assert list(by) == [code]
    f = by[code]
    assert f.evidence[key] == value
    assert f.evidence["hypothesis_tv"] <= 1e-4 < f.evidence["tv"]
    assert f.where.candidate == "candidate_logits_processor"
    assert report.exit_code == 1


def test_sampler_ignoring_the_generator_is_seed_ignored():
    _, by = _sampling("sampling_seed_ignored")
    assert list(by) == ["sampling.seed_ignored"]
    assert by["sampling.seed_ignored"].evidence["same_seed_equal"] is False


def test_reference_processors_follow_generation_config_order():
    import torch

    from porting_kit.probes.sampling import distribution_gap, reference_process

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    ids = torch.tensor([[3]])
    out = reference_process(logits, ids, {"repetition_penalty": 2.0, "temperature": 0.5})
    # token 3 is negative: multiplied by the penalty (-2), then everything / 0.5
    assert torch.allclose(out, torch.tensor([[4.0, 2.0, 0.0, -4.0]]))
    assert distribution_gap(out, out)[0] == 0.0


def test_bad_sampling_params_is_input_error(tmp_path):
    spec = tmp_path / "s.py"
    spec.write_text("def engine_model():\n    return None\n"
                    "def candidate_logits_processor(logits, ids, params):\n    return logits\n"
                    "def sampling_params():\n    return 'temperature=0.7'\n")
    with pytest.raises(InputError, match=r"sampling_params\(\) must return a non-empty list of dicts"):
        run_check(str(spec), only="sampling")
    spec.write_text(spec.read_text().replace("'temperature=0.7'", "[{'temprature': 0.7}]"))
    with pytest.raises(InputError, match="unknown sampling parameter"):
        run_check(str(spec), only="sampling")
