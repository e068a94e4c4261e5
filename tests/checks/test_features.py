"""Features family: the port's log-mel of a reference clip against the reference processor's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("librosa")

import torch  # noqa: E402

from porting_kit import run_check  # noqa: E402
from porting_kit.embedded import tts_features as tf  # noqa: E402
from porting_kit.spec import Spec, load_spec  # noqa: E402


def _features(variant=None):
    report = run_check(example="tts" if variant is None else f"tts:{variant}", only="features")
    return report, {f.code: f for f in report.findings}


def test_clean_port_features_match_the_reference():
    report, by = _features()
    assert list(by) == ["features.ok"]
    ev = by["features.ok"].evidence
    assert ev["reference_frames"] == ev["candidate_frames"] == 315
    assert ev["reference_shape"] == "(80, 315)"
    assert ev["max_abs_err"] < 1e-4 < ev["tolerance_abs"]  # measured 3.9e-5 (float32 vs float64)
    assert report.exit_code == 0


@pytest.mark.parametrize("variant,code,key,value", [
    ("features_resample", "features.resample", "assumed_rate", 16000),
    ("features_htk_mel", "features.mel_filterbank", "candidate_mel_scale", "htk"),
    ("features_mel_norm", "features.mel_filterbank", "hypothesis", "per_bin_offset"),
    ("features_log_floor", "features.log_floor", "hypothesis", "floor_only"),
    ("features_center", "features.framing", "offset_samples", 300),  # n_fft/2 = 200 at 16 kHz
])
def test_planted_feature_faults_are_named(variant, code, key, value):
    report, by = _features(variant)
    assert list(by) == [code]
    f = by[code]
    assert f.status == "fail" and f.evidence[key] == value
    assert f.evidence["max_abs_err"] > f.evidence["tolerance_abs"]
    assert report.exit_code == 1


def test_evidence_names_both_sides():
    _, by = _features("features_resample")
    ev = by["features.resample"].evidence
    assert (ev["reference_frames"], ev["candidate_frames"]) == (315, 473)  # 24 kHz read as 16 kHz
    _, by = _features("features_htk_mel")
    assert by["features.mel_filterbank"].evidence["reference_mel_scale"] == "slaney"
    _, by = _features("features_center")
    assert by["features.framing"].evidence["candidate_frames"] == 313


def _torch_logmel(wav, sr, log=torch.log10, pad_mode="reflect", floor=1e-10):
    """A torch port of the embedded extractor with other log / padding choices."""
    import librosa

    y = torch.from_numpy(tf._resample(wav, sr, np.float32))
    st = torch.stft(y, tf.N_FFT, tf.HOP_LENGTH, window=torch.hann_window(tf.N_FFT), center=True,
                    pad_mode=pad_mode, return_complex=True)
    fb = torch.from_numpy(librosa.filters.mel(sr=tf.SAMPLE_RATE, n_fft=tf.N_FFT, n_mels=tf.N_MELS,
                                              norm="slaney").astype(np.float32))
    lg = log(torch.clamp(fb @ st.abs().pow(2), min=floor))
    return (torch.maximum(lg, lg.max() - tf.DYNAMIC_RANGE) + 4.0) / 4.0


def _spec(candidate, **extra) -> Spec:
    mod = types.ModuleType("features_spec")
    mod.reference_features = tf.reference_features
    mod.candidate_features = candidate
    for k, v in extra.items():
        setattr(mod, k, v)
    return Spec(module=mod, name="features_spec")


def _one(spec):
    (f,) = run_check(spec, only="features").findings
    return f


def test_ln_for_log10_is_a_log_floor_fault():
    f = _one(_spec(lambda w, s: _torch_logmel(w, s, log=torch.log)))
    assert f.code == "features.log_floor" and f.evidence["hypothesis"] == "log_affine"
    assert f.evidence["scale_over_ln10"] == pytest.approx(1.0, abs=1e-3)


def test_constant_padding_is_framing_at_the_edges():
    f = _one(_spec(lambda w, s: _torch_logmel(w, s, pad_mode="constant")))
    assert f.code == "features.framing" and f.evidence["hypothesis"] == "edge_frames"


def test_another_resampler_is_a_warning_not_a_fault():
    import librosa

    def soxr(w, s):
        return tf.candidate_features(librosa.resample(w, orig_sr=s, target_sr=16000, res_type="soxr_hq"), 16000)

    report = run_check(_spec(soxr), only="features")
    (f,) = report.findings
    assert (f.code, f.status) == ("features.resample", "warn")
    assert f.evidence["resampler"] == "soxr_hq" and f.evidence["target_rate"] == 16000
    assert f.evidence["max_abs_err"] > f.evidence["tolerance_abs"]  # the filters do differ (0.27 on bin 79)
    assert report.exit_code == 0


def test_a_dropped_last_frame_is_framing():
    f = _one(_spec(lambda w, s: tf.candidate_features(w, s)[:, :-1]))  # Whisper's log_spec[:, :-1]
    assert f.code == "features.framing"
    assert (f.evidence["offset_samples"], f.evidence["frame_count_difference"]) == (0, -1)


def _stft_port(n_fft_stft=tf.N_FFT, n_fft_filters=tf.N_FFT):
    """The clean torch port with another STFT size (filters built for ``n_fft_filters``)."""
    import librosa

    def port(wav, sr):
        y = torch.from_numpy(tf._resample(wav, sr, np.float32))
        st = torch.stft(y, n_fft_stft, tf.HOP_LENGTH, window=torch.hann_window(n_fft_stft), center=True,
                        pad_mode="reflect", return_complex=True)
        fb = librosa.filters.mel(sr=tf.SAMPLE_RATE, n_fft=n_fft_filters, n_mels=tf.N_MELS, norm="slaney")
        bins = n_fft_stft // 2 + 1
        fb = np.pad(fb, ((0, 0), (0, max(0, bins - fb.shape[1]))))[:, :bins]
        lg = torch.clamp(torch.from_numpy(fb.astype(np.float32)) @ st.abs().pow(2), min=1e-10).log10()
        return (torch.maximum(lg, lg.max() - tf.DYNAMIC_RANGE) + 4.0) / 4.0
    return port


@pytest.mark.parametrize("name, candidate", [
    ("cast_to_int", lambda w, s: tf.candidate_features(w, s).to(torch.int64)),
    ("rounded_to_int", lambda w, s: tf.candidate_features(w, s).round().to(torch.int64)),
    ("n_fft_512", _stft_port(512, 512)),
    ("n_fft_512_filters_400", _stft_port(512, 400)),
])
def test_faults_no_hypothesis_reproduces_are_a_mismatch(name, candidate):
    """Peaks that move along one mel scale (quantised features, another STFT size) are not a
    filter-centre fault, and a candidate constant off the floors is not a log scale."""
    f = _one(_spec(candidate))
    assert f.code == "features.mismatch", (name, f.message)
    tried = f.evidence["hypotheses_tried"]
    assert "filter_centres: chirp peaks of" in tried
    if name in ("rounded_to_int", "n_fft_512_filters_400"):  # the peaks move, along one scale
        assert "but both follow the slaney mel scale" in tried


def test_unexplained_difference_is_a_mismatch_naming_bin_and_frame():
    def noisy(w, s):
        out = tf.candidate_features(w, s).numpy().copy()
        out[7, 100:110] += np.linspace(0.1, 0.5, 10)  # a local error no hypothesis explains
        return out

    f = _one(_spec(noisy))
    assert f.code == "features.mismatch"
    assert (f.evidence["worst_mel_bin"], f.evidence["worst_frame"]) == (7, 109)


def test_log_floor_1e5_for_1e10_is_a_log_floor_fault():
    f = _one(_spec(lambda w, s: _torch_logmel(w, s, floor=1e-5)))
    assert f.code == "features.log_floor" and f.evidence["hypothesis"] == "floor_only"
    assert f.evidence["candidate_floor"] == pytest.approx(-0.25)  # (log10(1e-5) + 4) / 4


def test_nan_entries_and_n_mels_are_named():
    def nan(w, s):
        out = tf.candidate_features(w, s).clone()
        out[3, 5] = float("nan")
        return out

    f = _one(_spec(nan))
    assert f.code == "features.mismatch" and f.evidence["nonfinite_entries"] == 1
    assert (f.evidence["worst_mel_bin"], f.evidence["worst_frame"]) == (3, 5)
    f = _one(_spec(lambda w, s: tf.candidate_features(w, s)[:64]))
    assert f.code == "features.mel_filterbank" and f.evidence["candidate_n_mels"] == 64


def test_frames_by_mels_layout_and_transposed_candidate():
    f = _one(_spec(lambda w, s: tf.candidate_features(w, s).T))  # (frames, n_mels) against (n_mels, frames)
    assert f.code == "features.ok" and f.evidence["candidate_transposed"] is True
    both_t = _spec(lambda w, s: tf.candidate_features(w, s).T, feature_layout="frames_mels")
    both_t.module.reference_features = lambda w, s: tf.reference_features(w, s).T
    f = _one(both_t)
    assert f.code == "features.ok" and f.evidence["candidate_transposed"] is False


def test_feature_clip_is_used():
    t = np.arange(16000) / 16000.0
    clip = (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    f = _one(_spec(tf.candidate_features, feature_clip=lambda: (clip, 16000)))
    assert f.code == "features.ok" and f.evidence["clip_samples"] == 16000
    assert f.evidence["clip_sample_rate"] == 16000


def test_spec_without_feature_names_is_skipped():
    report = run_check(example="generator", only="features")
    (f,) = report.findings
    assert f.code == "features.skipped" and "reference_features" in f.message


def test_features_only_spec_loads_and_runs(tmp_path):
    p = tmp_path / "feat_spec.py"
    p.write_text(textwrap.dedent("""
        from porting_kit.embedded import tts_features as tf
        reference_features = tf.reference_features
        def candidate_features(waveform, sample_rate):
            return tf.candidate_features(waveform, sample_rate, tf.faults_for("features_htk_mel"))
    """))
    spec = load_spec(p)
    assert _one(spec).code == "features.mel_filterbank"


def test_bad_feature_output_is_an_input_error():
    from porting_kit.errors import InputError

    with pytest.raises(InputError, match="expected \\(n_mels, frames\\)"):
        run_check(_spec(lambda w, s: np.zeros(10)), only="features")
    with pytest.raises(InputError, match="feature_clip\\(\\) must return"):
        run_check(_spec(tf.candidate_features, feature_clip=lambda: np.zeros(5)), only="features")


@pytest.mark.slow
def test_bad_feature_output_is_exit_2(tmp_path):
    p = tmp_path / "bad_spec.py"
    p.write_text(textwrap.dedent("""
        import numpy as np
        from porting_kit.embedded import tts_features as tf
        reference_features = tf.reference_features
        def candidate_features(waveform, sample_rate):
            return np.zeros(10)
    """))
    r = subprocess.run([sys.executable, "-m", "porting_kit", "check", str(p), "--only", "features"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "expected (n_mels, frames)" in r.stderr


WHISPER = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "whisper_features.py")


@pytest.mark.slow
@pytest.mark.parametrize("variant,code", [
    (None, "features.ok"), ("keep_last_frame", "features.framing"), ("htk_mel", "features.mel_filterbank"),
    ("no_resample", "features.resample"), ("no_clamp", "features.log_floor"),
])
def test_real_whisper_feature_extractor_pair(variant, code):
    (f,) = run_check(WHISPER, variant=variant, only="features").findings
    assert f.code == code
    if variant is None:
        assert f.evidence["max_abs_err"] < 1e-5 and f.evidence["reference_frames"] == 314


@pytest.mark.parametrize("ret, line", [
    (None, "candidate_features(waveform, sample_rate) returned None: expected (n_mels, frames)"),
    ("mel", "candidate_features(waveform, sample_rate) returned a str: expected (n_mels, frames)"),
    (np.float32(1.0), "candidate_features(waveform, sample_rate) returned features of shape (): expected"),
    (np.zeros(10), "candidate_features(waveform, sample_rate) returned features of shape (10,): expected"),
])
def test_bad_feature_output_names_the_function(ret, line):
    """The exit-2 line names the spec function to fix, also for None (no 'features of shape ()')."""
    from porting_kit.errors import InputError

    spec = _spec(lambda w, s: ret)
    with pytest.raises(InputError) as e:
        run_check(spec, only="features")
    assert str(e.value).startswith(f"features_spec: {line}") and "\n" not in str(e.value)


def test_bad_reference_feature_output_names_reference_features():
    from porting_kit.errors import InputError

    m = types.SimpleNamespace(reference_features=lambda w, s: None, candidate_features=tf.candidate_features)
    with pytest.raises(InputError, match=r"reference_features\(waveform, sample_rate\) returned None"):
        run_check(Spec(module=m, name="feat"), only="features")


def test_spec_with_only_reference_features_names_candidate_features(tmp_path):
    from porting_kit.errors import InputError

    p = tmp_path / "half.py"
    p.write_text("def reference_features(waveform, sample_rate):\n    return None\n")
    with pytest.raises(InputError, match=r"features spec lacks candidate_features\(waveform, sample_rate\)"):
        load_spec(p)
    p.write_text("def candidate_features(waveform, sample_rate):\n    return None\n")
    with pytest.raises(InputError, match=r"features spec lacks reference_features\(waveform, sample_rate\)"):
        load_spec(p)
