"""End-to-end quality parity (issue 30): espeak-ng fixtures, planted degradations, exact codes.

The reference is espeak-ng ``en-us`` with a seeded speed/pitch jitter per take (its own
spread); the clean candidate draws its jitter from another stream, so it copies no
reference take and must pass. Each planted degradation must be named by its code.
Fast tier: duration, MCD, seams, sample rate. Slow tier: the ASR round trip, the
speaker encoder and DNSMOS (their packages load models).
"""

from __future__ import annotations

import json

import pytest

from porting_kit.checks.quality import MARGINS, threshold
from porting_kit.embedded import espeak_pair as ep
from porting_kit.probes.quality import synthesize_take_set, write_take_set
from porting_kit.quality_files import compare_quality, quality_report

pytestmark = pytest.mark.skipif(not ep.espeak_available(),
                                reason="espeak-ng is not installed (apt-get install -y espeak-ng; CI installs it)")

FAST = ["duration", "mcd", "seam"]
#: Two prompts keep the fast tier cheap; the slow tier speaks all three.
FAST_PROMPTS = {k: ep.quality_prompts[k] for k in ("p01", "p03")}


def _candidate(variant, prompts, deterministic=False):
    ep.VARIANT, ep.DETERMINISTIC = variant, deterministic
    try:
        return synthesize_take_set(ep.synthesize_candidate, prompts, ep.quality_seeds,
                                   chunk_samples=ep.CHUNK_SAMPLES, source=f"espeak:{variant}")
    finally:
        ep.VARIANT, ep.DETERMINISTIC = None, False


@pytest.fixture(scope="module")
def reference():
    return synthesize_take_set(ep.synthesize_reference, FAST_PROMPTS, ep.quality_seeds, source="espeak")


def _fails(report):
    return sorted(f.code for f in report.findings if f.status == "fail")


def test_clean_pair_passes_with_a_real_spread(reference):
    report = quality_report(reference, _candidate(None, FAST_PROMPTS), metrics=FAST)
    assert _fails(report) == [] and report.codes("pass") == ["quality.ok"]
    rows = {r["metric"]: r for r in report.quality["metrics"]}
    # the jitter gives the reference a spread of its own, and the clean candidate is not a copy
    assert rows["duration"]["reference_spread"] > 0.005
    assert rows["mcd"]["reference_spread"] > 1.0 and rows["mcd"]["candidate"] > 1.0
    for name in FAST:
        assert rows[name]["verdict"] == "pass"
        assert rows[name]["candidate"] <= rows[name]["threshold"]
    assert report.exit_code == 0


@pytest.mark.parametrize("variant, code", [
    ("time_stretch", "quality.duration"),
    ("seam_click", "quality.seam"),
    ("noise", "quality.mcd"),
    ("sample_rate", "quality.sample_rate"),
])
def test_planted_degradation_named(reference, variant, code):
    report = quality_report(reference, _candidate(variant, FAST_PROMPTS), metrics=FAST)
    fails = _fails(report)
    assert code in fails, fails
    assert report.exit_code == 1
    if code != "quality.sample_rate":
        f = report.by_code(code)[0]
        metric = code.split(".")[1]
        assert f.evidence["candidate"] > f.evidence["threshold"] == pytest.approx(
            threshold(metric, f.evidence["reference_spread"]), abs=1e-3)
        assert f.evidence["prompt1"] in FAST_PROMPTS and f.evidence["prompt1_text"] == FAST_PROMPTS[f.evidence["prompt1"]]
    if variant == "seam_click":  # a click per chunk changes nothing else a listener would measure
        assert fails == ["quality.seam"]
    if variant == "sample_rate":  # resampled within the shared band, the content still matches
        assert fails == ["quality.sample_rate"]
        assert report.by_code(code)[0].evidence == {"reference_sample_rate": 22050,
                                                   "candidate_sample_rate": 16000, "source": "espeak:sample_rate"}


@pytest.mark.slow
@pytest.mark.parametrize("variant, code", [
    ("dropped_words", "quality.duration"),
    ("other_voice", "quality.mcd"),
])
def test_planted_degradation_seen_by_the_fast_metrics(reference, variant, code):
    assert code in _fails(quality_report(reference, _candidate(variant, FAST_PROMPTS), metrics=FAST))


INTRUSIVE = ["stoi", "pesq"]


def test_stoi_pesq_on_a_deterministic_pair(reference):
    """A deterministic port (each seed repeats the reference's take) lines up take by take:
    clean it passes with no drop; white noise at 5 dB SNR on it is quality.stoi and quality.pesq.
    The sampled (jittered) clean pair is not applicable: a skip note, never a fail."""
    pytest.importorskip("pystoi")
    pytest.importorskip("pesq")
    clean = quality_report(reference, _candidate(None, FAST_PROMPTS, deterministic=True), metrics=INTRUSIVE)
    assert [f.code for f in clean.findings] == ["quality.ok"] and clean.exit_code == 0
    rows = {r["metric"]: r for r in clean.quality["metrics"]}
    assert rows["stoi"]["candidate"] == pytest.approx(0, abs=1e-4)
    assert rows["pesq"]["candidate"] == pytest.approx(0, abs=0.01)
    assert "6 of 6" in rows["pesq"]["note"] and "wb at 16000 Hz" in rows["pesq"]["note"]
    noisy = quality_report(reference, _candidate("noise", FAST_PROMPTS, deterministic=True), metrics=INTRUSIVE)
    assert _fails(noisy) == ["quality.pesq", "quality.stoi"] and noisy.exit_code == 1
    for code in ("quality.stoi", "quality.pesq"):
        f = noisy.by_code(code)[0]
        assert f.evidence["candidate"] > f.evidence["threshold"] == MARGINS[f.evidence["metric"]][1]
        assert f.evidence["prompt1"] in FAST_PROMPTS
    sampled = quality_report(reference, _candidate("noise", FAST_PROMPTS), metrics=INTRUSIVE)
    assert _fails(sampled) == []
    assert [f.status for f in sampled.findings] == ["skip", "skip", "pass"]
    assert all("not applicable: takes not aligned (sampling on)" in f.message for f in sampled.findings[:2])


def _needs(*modules):
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{missing} not installed: pip install porting-kit[quality]")


@pytest.fixture(scope="module")
def full_reference():
    return synthesize_take_set(ep.synthesize_reference, ep.quality_prompts, ep.quality_seeds, source="espeak")


@pytest.mark.slow
@_needs("pocketsphinx", "jiwer")
def test_asr_round_trip_names_dropped_words(full_reference):
    clean = quality_report(full_reference, _candidate(None, ep.quality_prompts), metrics=["wer"])
    assert _fails(clean) == []
    dropped = quality_report(full_reference, _candidate("dropped_words", ep.quality_prompts), metrics=["wer"])
    assert _fails(dropped) == ["quality.wer"]
    f = dropped.by_code("quality.wer")[0]
    assert f.evidence["candidate"] > f.evidence["reference_spread"] + MARGINS["wer"][1]
    # the worst prompts come with both transcripts
    assert isinstance(f.evidence["prompt1_reference_transcript"], str)
    assert isinstance(f.evidence["prompt1_candidate_transcript"], str)


@pytest.mark.slow
@_needs("resemblyzer", "webrtcvad")
def test_speaker_encoder_names_another_voice(full_reference):
    clean = quality_report(full_reference, _candidate(None, ep.quality_prompts), metrics=["speaker"])
    assert _fails(clean) == []
    other = quality_report(full_reference, _candidate("other_voice", ep.quality_prompts), metrics=["speaker"])
    assert _fails(other) == ["quality.speaker"]


@pytest.mark.slow
@_needs("speechmos", "onnxruntime")
def test_dnsmos_names_added_noise(full_reference):
    clean = quality_report(full_reference, _candidate(None, ep.quality_prompts), metrics=["mos"])
    assert _fails(clean) == []
    noisy = quality_report(full_reference, _candidate("noise", ep.quality_prompts), metrics=["mos"])
    assert _fails(noisy) == ["quality.mos"]


def test_folders_round_trip_and_cli(reference, tmp_path):
    """``porting-kit quality`` on two folders: one table, the JSON report, the exit code."""
    from porting_kit.cli import main

    write_take_set(reference, tmp_path / "ref")
    write_take_set(_candidate("seam_click", FAST_PROMPTS), tmp_path / "cand")
    report = compare_quality(tmp_path / "ref", tmp_path / "cand", metrics="seam")
    assert _fails(report) == ["quality.seam"]
    out = tmp_path / "r.json"
    assert main(["quality", str(tmp_path / "ref"), str(tmp_path / "cand"), "--metrics", "seam,duration",
                 "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["schema"] == "porting-kit/report/1" and data["command"] == "quality"
    assert [f["code"] for f in data["findings"]] == ["quality.seam"]
    assert [r["metric"] for r in data["quality"]["metrics"]] == ["duration", "seam"]
    assert data["quality"]["cannot_see"] and "--asr" in data["quality"]["hooks"]
    # no chunk size: the seam metric skips with the reason, the rest still judges
    (tmp_path / "cand" / "prompts.json").unlink()
    assert main(["quality", str(tmp_path / "ref"), str(tmp_path / "cand"), "--metrics", "seam"]) == 0


def test_quality_family_in_check(tmp_path):
    """``porting-kit check --only quality`` on a spec that synthesises both sides: same verdicts,
    and the JSON carries the metric table; a spec without the names skips with the reason."""
    from porting_kit.runner import run_check

    spec = tmp_path / "espeak_spec.py"
    spec.write_text(
        "import porting_kit.embedded.espeak_pair as ep\n"
        "VARIANTS = ep.VARIANTS\nVARIANT = None\n"
        "quality_prompts = {'p01': 'The quick brown fox jumps over the lazy dog.'}\n"
        "quality_metrics = ['duration', 'seam']\nquality_chunk_samples = ep.CHUNK_SAMPLES\n"
        "def synthesize_reference(text, seed):\n    return ep.synthesize_reference(text, seed)\n"
        "def synthesize_candidate(text, seed):\n    ep.VARIANT = VARIANT\n"
        "    try:\n        return ep.synthesize_candidate(text, seed)\n"
        "    finally:\n        ep.VARIANT = None\n")
    report = run_check(str(spec), variant="seam_click", only="quality")
    assert report.codes("fail") == ["quality.seam"]
    data = report.to_dict()
    assert [r["metric"] for r in data["quality"]["metrics"]] == ["duration", "seam"]
    skipped = run_check(example="tts", only="quality")
    assert [(f.code, f.status) for f in skipped.findings] == [("quality.skipped", "skip")]
    assert "quality_prompts" in skipped.findings[0].message
