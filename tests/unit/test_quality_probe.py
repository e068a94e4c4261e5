"""The quality probe on its own (issue 30): the take-folder layout, its bad inputs, the seam metric.

No espeak-ng here: the clips are synthetic (an amplitude-modulated harmonic tone with noise),
so these run everywhere in the fast tier.
"""

from __future__ import annotations

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
