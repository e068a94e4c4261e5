"""Sampling family: a ``candidate_sampler`` compared through its draws (as a distribution)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from porting_kit import run_check  # noqa: E402
from porting_kit.errors import InputError  # noqa: E402
from porting_kit.probes import sampling as probe  # noqa: E402

# A spec exposing only candidate_sampler: the embedded port's draw with one fault knob.
_SAMPLER_ONLY = '''
from porting_kit.embedded import tts_sampling as s

sampling_draws = {draws}
FAULTS = s.SamplerFaults({faults})


def sampling_params():
    return [{params}]


def candidate_sampler(logits, input_ids, params, generator):
    # scalar parameters: (batch, vocab) logits; the port's sampler takes a codebook axis
    return s.sample(logits.unsqueeze(1), input_ids.unsqueeze(1), params, generator, FAULTS).squeeze(1)
'''
_PARAMS = "{'temperature': 0.7, 'top_k': 50, 'top_p': 0.8, 'repetition_penalty': 1.3}"


def _sampler_only(tmp_path, faults="", draws=1000, params=_PARAMS):
    spec = tmp_path / "sampler_only.py"
    spec.write_text(_SAMPLER_ONLY.format(draws=draws, faults=faults, params=params))
    report = run_check(str(spec), only="sampling")
    return report, {f.code: f for f in report.findings}


def test_tv_bound_is_mean_bound_plus_mcdiarmid():
    p = torch.full((1, 4), 0.25, dtype=torch.float64)
    mean = 0.5 * 4 * math.sqrt(0.25 * 0.75 / 100)
    assert float(probe.tv_bound(p, 100, math.exp(-2.0))) == pytest.approx(mean + 0.1, rel=1e-12)
    # a point mass has no sampling noise: only the deviation term is left
    assert float(probe.tv_bound(torch.tensor([[1.0, 0.0]], dtype=torch.float64), 50, math.exp(-1.0))) \
        == pytest.approx(0.1, rel=1e-12)


def test_sampler_only_spec_clean_passes_from_its_draws(tmp_path):
    report, by = _sampler_only(tmp_path)
    assert list(by) == ["sampling.ok"], [(f.code, f.message) for f in report.findings]
    ev = by["sampling.ok"].evidence
    assert ev["draws"] == 1000 and ev["batched"] is True and ev["false_alarm"] == 1e-6
    assert 0 < ev["tv_draws_max"] < ev["tv_bound_min"]
    assert report.exit_code == 0


def test_sampler_only_spec_penalty_sign_is_named_from_its_draws(tmp_path):
    report, by = _sampler_only(tmp_path, faults="penalty_sign=True")
    assert list(by) == ["sampling.repetition_penalty"]
    f = by["sampling.repetition_penalty"]
    assert f.where.candidate == "candidate_sampler" and f.evidence["how"] == "sign"
    assert f.evidence["tv"] > f.evidence["tv_bound"] and f.evidence["hypothesis_excess"] <= 0
    assert f.evidence["draws"] == 1000 and f.evidence["worst_batch"] == 1  # the all-negative row
    assert report.exit_code == 1


def test_sampler_returning_ids_outside_the_vocabulary_is_input_error(tmp_path):
    spec = tmp_path / "bad.py"
    spec.write_text("import torch\n"
                    "def sampling_params():\n    return [{'temperature': 0.7}]\n"
                    "def candidate_sampler(logits, ids, params, generator):\n"
                    "    return torch.full(logits.shape[:-1], logits.shape[-1], dtype=torch.long)\n")
    with pytest.raises(InputError, match=r"candidate_sampler\(\): the sampler returned token id 256 outside"):
        run_check(str(spec), only="sampling")


@pytest.mark.parametrize("value", [10, 2.5, "many"])
def test_bad_sampling_draws_is_input_error(tmp_path, value):
    spec = tmp_path / "s.py"
    spec.write_text(_SAMPLER_ONLY.format(draws=repr(value), faults="", params=_PARAMS))
    with pytest.raises(InputError, match="sampling_draws must be an int >= 100"):
        run_check(str(spec), only="sampling")


@pytest.mark.slow
def test_sampler_taking_one_batch_only_is_called_once_per_draw(tmp_path):
    spec = tmp_path / "one.py"
    spec.write_text("import torch\n"
                    "from porting_kit.embedded import tts_sampling as s\n"
                    "def sampling_params():\n    return [{'temperature': 0.7, 'top_k': 5}]\n"
                    "def candidate_sampler(logits, ids, params, generator):\n"
                    "    if logits.shape[0] != 2:\n"
                    "        raise ValueError('this port samples one fixed batch of 2')\n"
                    "    return s.sample(logits.unsqueeze(1), ids.unsqueeze(1), params, generator,\n"
                    "                    s.SamplerFaults()).squeeze(1)\n")
    report = run_check(str(spec), only="sampling")
    (f,) = report.findings
    assert f.code == "sampling.ok", f.message
    assert f.evidence["batched"] is False and f.evidence["draws"] == probe.LOOP_DRAWS
    assert f.evidence["codebooks"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("variant,code,key,value", [
    ("sampling_draw_penalty_sign", "sampling.repetition_penalty", "how", "sign"),
    ("sampling_draw_order", "sampling.order", "order", "filters_first"),
    ("sampling_draw_codebook_routing", "sampling.codebook_routing", "routing", "roll+1"),
    ("sampling_draw_no_min_p", "sampling.unexplained", None, None),
])
def test_embedded_sampler_only_faults_are_named_from_the_draws(variant, code, key, value):
    report = run_check(example=f"tts:{variant}", only="sampling")
    assert report.codes() == [code]
    (f,) = report.findings
    assert f.where.candidate == "candidate_sampler"
    assert f.evidence["draws"] == probe.DRAWS and f.evidence["tv"] > f.evidence["tv_bound"]
    if key is None:
        assert f.evidence["hypothesis_excess"] > 0  # no known fault within its bound
    else:
        assert f.evidence[key] == value and f.evidence["hypothesis_excess"] <= 0
    assert report.exit_code == 1


@pytest.mark.slow
def test_clean_sampler_draws_never_alarm_over_50_seeds():
    from porting_kit.embedded import tts_sampling as s

    params_list = s.sampling_params()
    logits, ids = probe.sampler_inputs(s.N_CODEBOOKS, s.VOCAB)

    def sampler(lg, hist, params, generator):
        return s.sample(lg, hist, params, generator, s.SamplerFaults())

    worst = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 150 sampler calls: one thread is faster on a shared machine
    try:
        for k in range(50):
            results = probe.compare_sampler(sampler, params_list, logits, ids, seed=1000 + 97 * k)
            worst.append(max(r.excess for r in results))
    finally:
        torch.set_num_threads(threads)
    assert max(worst) < 0, worst  # tv - bound over every row of every set, for every seed
