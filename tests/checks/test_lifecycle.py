"""Lifecycle contract checks (family ``lifecycle`` + ``channel.shape_contract``)."""

import functools

import pytest

from porting_kit.embedded.generator import VARIANTS
from porting_kit.runner import run_check

LIFECYCLE_VARIANTS = {
    "cumulative_output": "lifecycle.cumulative_output",
    "dummy_leaves_rows_running": "lifecycle.dummy_not_finished",
    "dummy_missing_model_outputs": "lifecycle.missing_model_outputs",
    "eos_flags_creation_order": "lifecycle.eos_mask_misaligned",
    "stereo_not_mixed": "channel.shape_contract",
}


@functools.cache
def _check(example: str):
    """One check run per example (reports are only read by the tests)."""
    return run_check(example=example, only="rng,lifecycle")


@pytest.mark.parametrize("variant,code", sorted(LIFECYCLE_VARIANTS.items()))
def test_lifecycle_variant_names_its_code(variant, code):
    report = _check(f"generator:{variant}")
    assert code in report.codes("fail"), report.codes()
    assert code in VARIANTS[variant]
    assert report.exit_code == 1


def test_clean_model_passes_lifecycle_with_four_interleaved_requests():
    from porting_kit.probes.engine_suite import get_suite
    from porting_kit.context import CheckContext
    from porting_kit.spec import load_spec

    ctx = CheckContext(spec=load_spec(example="generator"))
    from porting_kit.checks import lifecycle

    findings = lifecycle.run(ctx)
    assert [f.code for f in findings] == ["lifecycle.ok"]
    suite = get_suite(ctx)
    interleaved = suite.batches[0]
    assert interleaved.name == "interleaved" and len(interleaved.calls[0].req_ids) == 4
    for rid, res in interleaved.results.items():
        solo = suite.solo[rid].results[rid]
        assert res.finished_by == "eos" and len(res.chunks) == len(solo.chunks)
        assert res.waveform().shape == solo.waveform().shape  # no truncation
    # requests of different length: EOS lands on different steps
    assert len({len(r.chunks) for r in interleaved.results.values()}) == 4


def test_eos_misalignment_shows_only_when_rows_are_permuted():
    report = _check("generator:eos_flags_creation_order")
    (f,) = report.by_code("lifecycle.eos_mask_misaligned")
    assert f.evidence["scenario"] in ("permuted", "joining")  # fifo rows = creation order
    assert f.evidence["batch_chunks"] != f.evidence["solo_chunks"]
    assert "rng.crosstalk" not in report.codes()  # the audio itself is right


def test_cumulative_output_evidence():
    (f,) = _check("generator:cumulative_output").by_code("lifecycle.cumulative_output")
    lens = f.evidence["chunk_samples"]
    assert lens[:3] == [960, 1920, 2880]


def test_dummy_not_finished_evidence():
    (f,) = _check("generator:dummy_leaves_rows_running").by_code("lifecycle.dummy_not_finished")
    assert f.evidence["rows_running"] >= 1


def test_missing_model_outputs_names_the_call():
    (f,) = _check("generator:dummy_missing_model_outputs").by_code("lifecycle.missing_model_outputs")
    assert f.evidence["call"] == "profile" and "model_outputs" in f.evidence["problem"]


def test_shape_contract_is_a_channel_finding():
    (f,) = _check("generator:stereo_not_mixed").by_code("channel.shape_contract")
    assert f.check == "channel" and f.evidence["shape"] == "(2, 960)"


def test_lifecycle_skips_without_engine_model(tmp_path):
    p = tmp_path / "synth.py"
    p.write_text("import torch\n\ndef synthesize_candidate(text, seed):\n"
                 "    return torch.zeros(10), 16000\n")
    report = run_check(str(p), only="lifecycle")
    assert report.codes() == ["lifecycle.skipped"] and report.exit_code == 0
