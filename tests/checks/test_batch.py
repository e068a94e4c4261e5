"""Batch parity family (issue 17, point 6): a padded batch equals each request run alone."""

import torch

from porting_kit.probes.batch import default_batch_inputs
from porting_kit.runner import run_check


def test_default_batch_inputs_truncate_inputs():
    reqs = default_batch_inputs({"input_ids": torch.arange(8)[None], "flag": 1})
    assert [r["input_ids"].shape[1] for r in reqs] == [8, 6, 4]
    assert all(r["flag"] == 1 for r in reqs)


def test_clean_tts_batch_ok_and_left_padding_is_row_mismatch():
    assert run_check(example="tts", only="batch").codes() == ["batch.ok"]
    rep = run_check(example="tts:batch_left_pad", only="batch")
    (f,) = rep.findings
    assert f.code == "batch.row_mismatch"
    ev = f.evidence
    assert (ev["row"], ev["row_length"], ev["bad_rows"], ev["padding_side"]) == (1, 48, "1, 2", "left")
    assert ev["first_module"] == "talker.layers.0.attn.rotary_emb"


def test_same_nan_in_both_runs_is_not_a_batch_fault():
    assert run_check(example="tts:nan_layer", only="batch").codes() == ["batch.ok"]


def test_spec_without_batched_forward_skips(tmp_path):
    spec = tmp_path / "gen.py"
    spec.write_text("def synthesize_candidate(text, seed):\n    return [0.0], 16000\n")
    (f,) = run_check(str(spec), only="batch").findings
    assert f.status == "skip" and f.code == "batch.skipped"
