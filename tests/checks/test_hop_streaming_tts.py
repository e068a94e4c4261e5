"""Streaming with lookahead and batched streaming on the embedded tts example (EnCodec, fp32):
the planted variants' evidence. Which code each variant gives: tests/checks/test_channel_tts.py."""

import pytest

from porting_kit.runner import run_check

pytestmark = pytest.mark.slow
HOP, LOOKAHEAD, FRAMES = 320, 2, 80


def _finding(variant, code):
    (f,) = run_check(example=f"tts:{variant}", only="hop").by_code(code)
    return f


def test_untrimmed_lookahead_evidence():
    f = _finding("audio_stream_lookahead_untrimmed", "hop.stream_lookahead")
    ev = f.evidence
    assert ev["trim_fit"] == "untrimmed" and ev["lookahead_frames"] == LOOKAHEAD
    assert ev["trim_samples"] == 0 and ev["expected_trim_samples"] == LOOKAHEAD * HOP
    assert ev["missing_samples"] == -7 * LOOKAHEAD * HOP  # 8 chunks of 10, the last without lookahead
    assert ev["first_mismatch_sample"] == (10 + LOOKAHEAD) * HOP  # causal: chunk 1 repeats the lookahead


def test_fixed_trim_evidence():
    f = _finding("audio_stream_lookahead_fixed_trim", "hop.stream_lookahead")
    assert f.evidence["trim_fit"] == "fixed_trim" and f.evidence["missing_samples"] == LOOKAHEAD * HOP
    assert f.where.samples == [(FRAMES - LOOKAHEAD) * HOP, FRAMES * HOP]


def test_batch_row_trim_evidence():
    f = _finding("audio_stream_batch_row_trim", "hop.stream_batch_row")
    ev = f.evidence
    assert ev["request"] == 1 and ev["batch_lengths"] == [80, 50, 21]
    assert ev["trimmed_like_request"] == 0
    assert ev["stream_samples"] == FRAMES * HOP and ev["expected_samples"] == 50 * HOP
    assert f.where.samples == [50 * HOP, FRAMES * HOP]
