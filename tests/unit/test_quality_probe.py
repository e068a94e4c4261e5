"""The quality probe on its own (issue 30): the take-folder layout, its bad inputs, the seam metric.

No espeak-ng here: the clips are synthetic (an amplitude-modulated harmonic tone with noise),
so these run everywhere in the fast tier.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porting_kit.checks.quality import findings
from porting_kit.cli import main
from porting_kit.errors import InputError
from porting_kit.probes.quality import TakeSet, measure_quality, read_take_set, seam_jumps, write_take_set

SR = 16000
PROMPTS = {"a": "one two three", "b": "four five six"}


def voiced(seed: int, seconds: float = 1.2, sr: int = SR):
    """A speech-like clip: harmonics of a wandering f0 under a syllable-rate envelope, plus noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    f0 = 120 + 10 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / sr
    y = sum(np.sin(k * phase) / k for k in range(1, 8))
    env = 0.5 * (1 + np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6))) ** 2
    return (0.2 * y * env + 0.002 * rng.standard_normal(t.size)).astype(np.float32)


def take_set(seed: int = 0, chunk=None, sr: int = SR) -> TakeSet:
    return TakeSet(dict(PROMPTS), {p: [voiced(seed * 100 + i * 10 + k, sr=sr) for k in range(3)]
                                   for i, p in enumerate(PROMPTS)}, sr, [0, 1, 2], chunk)


def test_layout_round_trip(tmp_path):
    write_take_set(take_set(chunk=800), tmp_path / "ref")
    back = read_take_set(tmp_path / "ref")
    assert back.prompts == PROMPTS and back.n_takes == 3 and back.sample_rate == SR
    assert back.chunk_samples == 800 and back.seeds == [0, 1, 2]
    assert back.takes["a"][0].shape == (int(1.2 * SR),)
    before = (tmp_path / "ref" / "a" / "take0.wav").read_bytes()
    with pytest.raises(InputError, match="already holds a take set"):
        write_take_set(take_set(5), tmp_path / "ref")
    assert (tmp_path / "ref" / "a" / "take0.wav").read_bytes() == before


@pytest.mark.parametrize("breakage, message", [
    ("no_sidecar", "no prompts.json"),
    ("bad_json", "not readable JSON"),
    ("no_prompts", "needs \"prompts\""),
    ("bad_id", "needs an id"),
    ("missing_prompt_folder", "missing; every prompt needs"),
    ("gap", "without gaps"),
    ("no_takes", "no take<k>.wav"),
    ("corrupt", "take0.wav"),
    ("two_rates", "different sample rates"),
])
def test_bad_reference_folder_is_one_line_exit_2(tmp_path, capsys, breakage, message):
    ref, cand = tmp_path / "ref", tmp_path / "cand"
    write_take_set(take_set(), ref)
    write_take_set(take_set(1), cand)
    side = ref / "prompts.json"
    if breakage == "no_sidecar":
        side.unlink()
    elif breakage == "bad_json":
        side.write_text("{")
    elif breakage == "no_prompts":
        side.write_text(json.dumps({"prompts": {}}))
    elif breakage == "bad_id":
        side.write_text(json.dumps({"prompts": {"../x": "text"}}))
    elif breakage == "missing_prompt_folder":
        side.write_text(json.dumps({"prompts": {**PROMPTS, "c": "seven"}}))
    elif breakage == "gap":
        (ref / "a" / "take1.wav").rename(ref / "a" / "take7.wav")
    elif breakage == "no_takes":
        for f in (ref / "b").iterdir():
            f.unlink()
    elif breakage == "corrupt":
        (ref / "a" / "take0.wav").write_bytes(b"RIFF not a wav")
    elif breakage == "two_rates":
        import soundfile as sf

        sf.write(str(ref / "b" / "take2.wav"), voiced(9, sr=8000), 8000)
    with pytest.raises(InputError, match=message):
        read_take_set(ref)
    assert main(["quality", str(ref), str(cand), "--metrics", "duration"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_candidate_must_speak_the_same_prompts(tmp_path):
    write_take_set(take_set(), tmp_path / "ref")
    other = take_set(1)
    other.prompts = {"a": "one two three", "b": "something else"}
    write_take_set(other, tmp_path / "cand")
    with pytest.raises(InputError, match="prompts differ"):
        read_take_set(tmp_path / "cand", prompts=PROMPTS)
    assert main(["quality", str(tmp_path / "ref"), str(tmp_path / "cand"), "--metrics", "nope"]) == 2


def test_clean_synthetic_pair_passes_and_a_missing_package_skips_with_the_install_command(monkeypatch):
    import porting_kit.probes.quality as q

    monkeypatch.setattr(q, "_available", lambda *mods: mods[0])  # as if no optional package were installed
    m = measure_quality(take_set(0, chunk=700), take_set(1, chunk=700), metrics=["duration", "seam", "wer", "mos"])
    out = findings(m)
    assert [f.code for f in out if f.status == "fail"] == []
    skips = [f.message for f in out if f.status == "skip"]
    assert any("wer" in s and "pip install pocketsphinx jiwer" in s for s in skips)
    assert any("mos" in s and "pip install speechmos onnxruntime" in s for s in skips)
    assert [f.code for f in out if f.status == "pass"] == ["quality.ok"]


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk=st.integers(300, 2000), amplitude=st.floats(0.2, 0.8), seed=st.integers(0, 10_000))
def test_a_click_at_every_seam_is_quality_seam(chunk, amplitude, seed):
    """Any chunk size, any click height from a fifth of full scale: the seam metric names it,
    and the same takes without the clicks pass."""
    ref, clean = take_set(seed, sr=SR), take_set(seed + 1, chunk=chunk)
    clicked = take_set(seed + 1, chunk=chunk)
    for clips in clicked.takes.values():
        for y in clips:
            for b in range(chunk, y.size, chunk):
                y[b] = np.clip(y[b] + amplitude * (1 if y[b - 1] <= 0 else -1), -1, 1)
    ok = findings(measure_quality(ref, clean, metrics=["seam"]))
    assert [f.code for f in ok] == ["quality.ok"]
    bad = findings(measure_quality(ref, clicked, metrics=["seam"]))
    assert [f.code for f in bad] == ["quality.seam"]
    assert bad[0].evidence["candidate"] > bad[0].evidence["threshold"]


def test_seam_jumps_sees_no_seam_in_a_short_clip():
    assert seam_jumps(voiced(0, 0.05), SR, 4000)["seams"] == 0


def test_asr_and_speaker_hooks_reach_the_verdicts(tmp_path, monkeypatch):
    """``--asr module:function`` / ``--speaker module:function``: the user's models are used as given."""
    pytest.importorskip("jiwer")
    (tmp_path / "my_models.py").write_text(
        "import numpy as np\n"
        "def transcribe(y, sr):\n"
        "    return 'one two three' if np.abs(y).max() > 0.5 else 'one'\n"
        "def embed(y, sr):\n"
        "    peak = min(float(np.abs(y).max()), 1.0)\n"
        "    return np.array([peak, 1.0 - peak])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ref, cand = tmp_path / "ref", tmp_path / "cand"
    write_take_set(take_set(0), ref)
    quiet = take_set(1)
    quiet.takes = {p: [y * 0.3 for y in clips] for p, clips in quiet.takes.items()}
    write_take_set(quiet, cand)
    out = tmp_path / "r.json"
    assert main(["quality", str(ref), str(cand), "--metrics", "wer,speaker", "--asr", "my_models:transcribe",
                 "--speaker", "my_models:embed", "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert [f["code"] for f in data["findings"]] == ["quality.wer", "quality.speaker"]
    wer = data["findings"][0]["evidence"]
    assert wer["asr"] == "my_models:transcribe" and wer["prompt1_candidate_transcript"] == "one"
    assert main(["quality", str(ref), str(cand), "--asr", "my_models:nope"]) == 2


#: STOI and PESQ themselves (pystoi comes with the quality extra; pesq is installed apart).
needs_stoi_pesq = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pystoi", "pesq")),
                                     reason="pip install pystoi pesq")


def _late(y, lag):
    """``y`` delayed by ``lag`` samples (leading silence), same content."""
    return np.concatenate([np.zeros(lag, np.float32), y]).astype(np.float32)


def test_align_pair_tells_the_same_utterance_from_another_take():
    """One cross-correlation lag lines up a deterministic take; another take of the same kind
    (another seed: sampling on) or a time-stretched one is not the same utterance in time."""
    import librosa

    from porting_kit.probes.quality import align_pair, shifted

    r = voiced(1)
    a = align_pair(r, _late(r, 37), SR)
    assert (a.lag, a.aligned) == (37, True) and a.correlation > 0.999 and a.length_mismatch == 0
    rr, cc = shifted(r, _late(r, 37), a.lag)
    assert np.array_equal(rr, cc)
    other = align_pair(r, voiced(2), SR)
    assert not other.aligned and other.correlation < 0.5
    stretched = align_pair(r, librosa.effects.time_stretch(r, rate=0.8), SR)
    assert not stretched.aligned and stretched.length_mismatch > 0.2


@needs_stoi_pesq
def test_stoi_pesq_not_applicable_with_sampling_on():
    """Takes of other seeds' draws never align: a skip note, never a fail."""
    m = measure_quality(take_set(0), take_set(1), metrics=["stoi", "pesq"])
    out = findings(m)
    assert [f.code for f in out if f.status == "fail"] == []
    skips = [f.message for f in out if f.status == "skip"]
    assert len(skips) == 2
    assert all("not applicable: takes not aligned (sampling on)" in s for s in skips)


def _deterministic(noise_db=None, lag=0):
    ref = take_set(0)
    rng = np.random.default_rng(7)
    takes = {}
    for p, clips in ref.takes.items():
        takes[p] = []
        for y in clips:
            c = y.copy()
            if noise_db is not None:
                c = c + (rng.standard_normal(c.size) * np.sqrt(np.mean(c ** 2) / 10 ** (noise_db / 10))).astype(np.float32)
            takes[p].append(_late(c, lag))
    return ref, TakeSet(dict(PROMPTS), takes, ref.sample_rate, [0, 1, 2])


@needs_stoi_pesq
def test_deterministic_pair_clean_passes_and_noise_is_quality_stoi_and_pesq():
    ref, clean = _deterministic(lag=25)
    out = findings(measure_quality(ref, clean, metrics=["stoi", "pesq"]))
    assert [f.code for f in out] == ["quality.ok"]
    assert out[0].evidence["stoi_candidate"] == pytest.approx(0, abs=1e-4)
    assert out[0].evidence["pesq_candidate"] == pytest.approx(0, abs=0.01)
    m = measure_quality(*_deterministic(noise_db=5, lag=25), metrics=["stoi", "pesq"])
    out = findings(m)
    assert [f.code for f in out if f.status == "fail"] == ["quality.stoi", "quality.pesq"]
    for f in out:
        assert f.evidence["candidate"] > f.evidence["threshold"] == f.evidence["margin_floor"]
        assert f.evidence["aligned_pairs"] == "6 of 6"
        assert f.evidence["reference_spread"] == 0  # one reference take per seed: the floor judges


@needs_stoi_pesq
def test_reference_takes_sharing_a_seed_give_the_spread():
    """Re-synthesised reference takes (same seed twice) set the spread; the bar is factor x spread + floor."""
    from porting_kit.checks.quality import metric_rows, threshold

    ref, cand = _deterministic()
    noisy = _deterministic(noise_db=30)[1]
    ref.takes = {p: [clips[0], noisy.takes[p][0], clips[2]] for p, clips in ref.takes.items()}
    ref.seeds = [0, 0, 1]
    r = measure_quality(ref, cand, metrics=["pesq"]).metrics["pesq"]
    assert r.reference_spread > 0.3
    assert r.detail["reference_spread_from"].startswith("2 aligned pairs of reference takes with the same seed")
    m = measure_quality(ref, cand, metrics=["pesq"])
    row = metric_rows(m)[0]
    assert row["threshold"] == pytest.approx(threshold("pesq", r.reference_spread), abs=1e-3)


@needs_stoi_pesq
@pytest.mark.parametrize("sr, expected", [(16000, "wb at 16000 Hz"), (11025, "nb at 8000 Hz"), (6000, None)])
def test_pesq_band_follows_the_rate(sr, expected):
    ref = TakeSet({"a": "x"}, {"a": [voiced(1, sr=sr)]}, sr, [0])
    r = measure_quality(ref, TakeSet({"a": "x"}, {"a": [voiced(1, sr=sr)]}, sr, [0]), metrics=["pesq"]).metrics["pesq"]
    if expected is None:
        assert r.skipped == "not applicable: PESQ needs 8 kHz or more, the reference is at 6000 Hz"
    else:
        assert r.skipped is None and r.detail["pesq_mode"] == expected and r.candidate == pytest.approx(0, abs=0.01)


@pytest.mark.parametrize("module, metric, command", [("pystoi", "stoi", "pip install pystoi"),
                                                     ("pesq", "pesq", "pip install pesq")])
def test_absent_intrusive_package_skips_with_the_install_command(monkeypatch, module, metric, command):
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # the import fails as if not installed
    ref, cand = _deterministic()
    out = findings(measure_quality(ref, cand, metrics=[metric]))
    assert [f.status for f in out] == ["skip", "pass"]
    assert out[0].code == "quality.skipped" and f"{metric}: {module} is not installed: {command}" in out[0].message


@needs_stoi_pesq
def test_stoi_on_too_little_speech_is_not_applicable_not_a_drop():
    """pystoi returns 1e-5 when too few frames are left: that must not read as a drop of 1."""
    ref = TakeSet({"a": "x"}, {"a": [voiced(1, seconds=0.2)]}, SR, [0])
    r = measure_quality(ref, ref, metrics=["stoi"]).metrics["stoi"]
    assert r.skipped == "not applicable: stoi found too little speech in 1 aligned pair(s) (clips too short or silent)"


def test_a_take_with_nan_samples_is_one_line_naming_the_file(tmp_path):
    sf = pytest.importorskip("soundfile")
    write_take_set(take_set(), tmp_path / "ref")
    clip = take_set().takes["a"][1].copy()
    clip[100] = np.nan
    sf.write(tmp_path / "ref" / "a" / "take1.wav", clip, SR, subtype="FLOAT")  # float WAV keeps the NaN
    with pytest.raises(InputError, match=r"take1\.wav: holds NaN or Inf samples"):
        read_take_set(tmp_path / "ref")


@pytest.mark.parametrize("ref", ["os:getcwd", "json:loads"])
def test_an_asr_hook_of_the_wrong_signature_is_named(ref):
    from porting_kit.probes.quality import load_callable

    with pytest.raises(InputError, match=r"must take \(waveform, sample_rate\)"):
        load_callable(ref, "--asr")
