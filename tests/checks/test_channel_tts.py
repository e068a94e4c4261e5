"""Audio checks on the embedded tts example's codec path: every audio_* variant gives its code.

Each run decodes with a seeded EnCodec (an LSTM in the decoder) about 30 times (full decodes,
the streamed chunks, the batched stream): 7-125 s a run on 2 shared CPU cores, so every run is
``slow``. The fast tier's clean and planted twins of these codes are the numpy toy codec's
(``tests/checks/test_audio_field_faults.py``, ``tests/checks/test_spec_forms.py``) and the toy
decoders of ``tests/checks/test_hop_streaming.py``.
"""

import pytest

from porting_kit.embedded.tts_audio import AUDIO_VARIANTS
from porting_kit.runner import run_check

ONLY = "hop,channel,dtype"
EXPECTED = {
    "audio_hop_trim": "hop.length_mismatch",
    "audio_codebook_order": "hop.codebook_order",
    "audio_offset": "hop.offset",
    "audio_duration_drift": "hop.duration_drift",
    "audio_sample_rate": "hop.sample_rate_mismatch",
    "audio_stream_context": "hop.stream_boundary",
    "audio_interleaved_flatten": "channel.interleaved_flatten",
    "audio_wrong_downmix": "channel.wrong_downmix",
    "audio_shape_contract": "channel.shape_contract",
    "audio_codec_bf16": "dtype.codec_autocast",
    # streaming with lookahead, batched streaming (issue 17 point 5)
    "audio_stream_lookahead_untrimmed": "hop.stream_lookahead",
    "audio_stream_lookahead_fixed_trim": "hop.stream_lookahead",
    "audio_stream_batch_row_trim": "hop.stream_batch_row",
}


def test_every_audio_variant_is_declared():
    from porting_kit.spec import load_spec

    assert set(EXPECTED) == set(AUDIO_VARIANTS)
    assert set(EXPECTED) <= set(load_spec(example="tts").variants)


@pytest.mark.slow
def test_clean_tts_passes_audio_families():
    rep = run_check(example="tts", only=ONLY)
    assert rep.codes() == ["hop.ok", "channel.ok", "dtype.ok"]
    assert rep.by_code("hop.ok")[0].evidence["streaming_checked"] is True
    assert rep.by_code("hop.ok")[0].evidence["batch_streaming_checked"] is True


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_tts_audio_variant_gives_its_code(variant):
    rep = run_check(example=f"tts:{variant}", only=ONLY)
    assert rep.codes("fail") == [EXPECTED[variant]]


@pytest.mark.slow
def test_tts_evidence():
    ev = run_check(example="tts:audio_offset", only="hop").by_code("hop.offset")[0].evidence
    assert ev["lag_samples"] == 120 and ev["lag_ms"] == 5.0
    ev = run_check(example="tts:audio_interleaved_flatten",
                   only="channel").by_code("channel.interleaved_flatten")[0].evidence
    assert ev["length_ratio"] == 2.0 and ev["layout"] == "interleaved"
    ev = run_check(example="tts:audio_stream_context", only="hop").by_code("hop.stream_boundary")[0].evidence
    assert ev["context_frames"] == 1 and ev["more_context_fixes"] is True


def test_non_audio_spec_skips(tmp_path):
    spec = tmp_path / "gen.py"
    spec.write_text("def synthesize_candidate(text, seed):\n    return [0.0], 16000\n")
    rep = run_check(str(spec), only=ONLY)
    assert rep.codes() == ["hop.skipped", "channel.skipped", "dtype.skipped"]
    assert "audio names" in rep.findings[0].message
