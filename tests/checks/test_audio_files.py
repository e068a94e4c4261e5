"""porting-kit audio REF CAND: WAV/FLAC pairs through the CLI and compare_files (issue 4)."""

from pathlib import Path

import numpy as np
import pytest
sf = pytest.importorskip("soundfile")

from porting_kit.audio_files import compare_files  # noqa: E402
from porting_kit.probes.waveform import estimate_lag, snr_db, spectral_peak_hz  # noqa: E402
from porting_kit.cli import main  # noqa: E402

CLIPS = Path(__file__).resolve().parents[2] / "reference_audio"


def _speech():
    y, sr = sf.read(CLIPS / "speech_en_us_24k.flac", dtype="float64")
    return y[: sr], sr  # first second of real espeak-ng speech


def _write(path, y, sr):
    sf.write(path, np.asarray(y).T if np.ndim(y) == 2 else y, sr, subtype="FLOAT")
    return str(path)


def test_interleaved_440hz_stereo_is_interleaved_flatten(tmp_path):
    sr = 16000
    t = np.arange(sr) / sr
    st = np.stack([0.5 * np.sin(2 * np.pi * 440 * t), 0.3 * np.sin(2 * np.pi * 440 * t + 0.5)])
    ref = _write(tmp_path / "st.wav", st, sr)
    cand = _write(tmp_path / "mono.wav", st.T.reshape(-1), sr)
    rep = compare_files(ref, cand)
    assert rep.codes("fail") == ["channel.interleaved_flatten"]
    ev = rep.by_code("channel.interleaved_flatten")[0].evidence
    assert ev["length_ratio"] == 2.0
    assert ev["candidate_peak_hz"] == pytest.approx(220.0, abs=0.5)
    assert ev["reference_peak_hz"] == pytest.approx(440.0, abs=0.5)
    assert main(["audio", ref, cand]) == 1


@pytest.mark.slow
def test_mean_downmix_passes_first_channel_is_wrong_downmix(tmp_path):
    y, sr = _speech()
    st = np.stack([y, 0.5 * np.roll(y, 300)])
    ref = _write(tmp_path / "st.wav", st, sr)
    assert compare_files(ref, _write(tmp_path / "mean.wav", st.mean(0), sr)).codes("fail") == []
    rep = compare_files(ref, _write(tmp_path / "first.wav", st[0], sr))
    assert rep.codes("fail") == ["channel.wrong_downmix"]
    assert rep.by_code("channel.wrong_downmix")[0].evidence["channel_used"] == 0


@pytest.mark.parametrize("fault, code, key, value", [
    ("offset", "hop.offset", "lag_samples", 120),
    ("trim", "hop.length_mismatch", "difference_samples", -320),
    ("drift", "hop.duration_drift", "duration_ratio", 22050 / 24000),
    ("sr", "hop.sample_rate_mismatch", "candidate_sample_rate", 22050),
    ("nan", "channel.shape_contract", "nonfinite_samples", 3),
    ("clip", "channel.shape_contract", "peak", 1.5),
])
def test_planted_faults_on_speech(tmp_path, fault, code, key, value):
    import librosa

    y, sr = _speech()
    ref = _write(tmp_path / "ref.wav", y, sr)
    c, csr = y.copy(), sr
    if fault == "offset":
        c = np.concatenate([np.zeros(120), y[:-120]])
    elif fault == "trim":
        c = y[:-320]
    elif fault == "drift":
        c = librosa.resample(y, orig_sr=24000, target_sr=22050)
    elif fault == "sr":
        csr = 22050
    elif fault == "nan":
        c[[10, 20, 30]] = np.nan
    elif fault == "clip":
        c = y / np.abs(y).max() * 1.5
    cand = _write(tmp_path / "cand.wav", c, csr)
    rep = compare_files(ref, cand, hop_length=320)
    assert rep.codes("fail") == [code]
    assert rep.by_code(code)[0].evidence[key] == pytest.approx(value, rel=1e-3)
    assert main(["audio", ref, cand, "--hop-length", "320"]) == 1


@pytest.mark.slow
def test_clean_pair_passes_with_json_and_plot(tmp_path):
    y, sr = _speech()
    ref = _write(tmp_path / "ref.wav", y, sr)
    sf.write(tmp_path / "cand.wav", y, sr, subtype="PCM_16")  # 16-bit quantisation only
    out, png = tmp_path / "r.json", tmp_path / "p.png"
    assert main(["audio", ref, str(tmp_path / "cand.wav"), "--json", str(out), "--plot", str(png)]) == 0
    import json

    data = json.loads(out.read_text())
    assert data["command"] == "audio" and data["status"] == "pass"
    assert {f["code"] for f in data["findings"]} == {"hop.ok", "channel.ok"}
    assert png.stat().st_size > 10_000


def test_unrelated_audio_is_unexplained(tmp_path):
    y, sr = _speech()
    noise = np.random.default_rng(0).standard_normal(y.size) * 0.05
    rep = compare_files(_write(tmp_path / "a.wav", y, sr), _write(tmp_path / "b.wav", noise, sr))
    assert rep.codes("fail") == ["hop.unexplained"]


def test_unreadable_files_exit_2_with_one_line(tmp_path, capsys):
    y, sr = _speech()
    good = _write(tmp_path / "good.wav", y, sr)
    (tmp_path / "corrupt.wav").write_bytes(b"RIFF\x00\x00garbage" * 10)
    sf.write(tmp_path / "empty.wav", np.zeros(0), sr)
    for bad in ("corrupt.wav", "empty.wav", "missing.wav"):
        capsys.readouterr()
        assert main(["audio", good, str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert bad in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert main(["audio", str(tmp_path), good]) == 2


def test_signal_helpers():
    sr = 8000
    t = np.arange(sr) / sr
    x = np.sin(2 * np.pi * 1000 * t)
    assert spectral_peak_hz(x, sr) == pytest.approx(1000, abs=0.5)
    rng = np.random.default_rng(1)
    a = rng.standard_normal(4000)
    b = np.concatenate([np.zeros(37), a])[:4000]
    assert estimate_lag(a, b, 200)[0] == 37
    assert snr_db(a, a) == float("inf")
    assert snr_db(a, a + 0.1 * a) == pytest.approx(20.0)


def _stereo_tones(sr=16000):
    t = np.arange(sr // 2) / sr
    return np.stack([0.5 * np.sin(2 * np.pi * 440 * t), 0.3 * np.sin(2 * np.pi * 660 * t + 0.5)])


def test_channels_2_clean_stereo_passes_mono_of_stereo_is_wrong_downmix(tmp_path, capsys):
    st, sr = _stereo_tones(), 16000
    ref = _write(tmp_path / "st.wav", st, sr)
    same = _write(tmp_path / "st_cand.wav", st, sr)
    mono = _write(tmp_path / "mono.wav", st.mean(0), sr)
    assert compare_files(ref, same, channels=2).codes("fail") == []
    assert compare_files(ref, mono).codes("fail") == []  # mono serving: the mean is right
    rep = compare_files(ref, mono, channels=2)
    assert rep.codes("fail") == ["channel.wrong_downmix"]
    ev = rep.by_code("channel.wrong_downmix")[0].evidence
    assert (ev["served_channels"], ev["mono_matches"], ev["candidate_samples"]) == (2, "mean", 8000)
    assert main(["audio", ref, mono, "--channels", "2"]) == 1
    assert main(["audio", ref, same, "--channels", "2"]) == 0


def test_channels_2_rows_of_interleaved_samples_is_axis_mismatch(tmp_path):
    st, sr = _stereo_tones(), 16000
    ref = _write(tmp_path / "st.wav", st, sr)
    bad = _write(tmp_path / "bad.wav", np.ascontiguousarray(st.T).reshape(2, -1), sr)
    rep = compare_files(ref, bad, channels=2)
    assert rep.codes("fail") == ["channel.axis_mismatch"]
    assert rep.by_code("channel.axis_mismatch")[0].evidence["layout"] == "reshaped"
