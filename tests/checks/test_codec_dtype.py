"""dtype.codec_autocast: the codec decoded in bf16 / autocast loses SNR against fp32."""

import math

from porting_kit.runner import run_check


def test_bf16_codec_is_codec_autocast_with_snr_evidence():
    rep = run_check(example="tts:audio_codec_bf16", only="dtype")
    (f,) = rep.findings
    assert f.code == "dtype.codec_autocast" and f.status == "fail"
    ev = f.evidence
    assert "bfloat16" in ev["codec_parameter_dtypes"]
    assert 20.0 < ev["candidate_snr_db"] < 60.0
    assert abs(ev["candidate_snr_db"] - ev["bf16_autocast_snr_db"]) < 20.0
    assert ev["candidate_output_dtype"] == "float32"


def test_fp32_codec_passes_and_reports_bf16_cost():
    (f,) = run_check(example="tts", only="dtype").findings
    assert f.code == "dtype.ok"
    assert math.isinf(f.evidence["candidate_snr_db"]) or f.evidence["candidate_snr_db"] > 60
    assert f.evidence["bf16_autocast_snr_db"] < 60.0
    assert f.evidence["codec_parameter_dtypes"].startswith("float32")
