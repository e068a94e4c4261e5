"""porting-kit baseline record / compare on the embedded example (reference_audio sidecars)."""

import json
from pathlib import Path

import pytest

sf = pytest.importorskip("soundfile")

from porting_kit.baseline import compare, read_sidecar, record  # noqa: E402
from porting_kit.cli import main  # noqa: E402

CLIPS = Path(__file__).resolve().parents[2] / "reference_audio"


def test_record_then_compare(tmp_path, capsys):
    paths = record(None, example="tts", out_dir=tmp_path)
    wav, side = paths
    assert wav.name == "tts.wav" and side.name == "tts.json"
    meta = json.loads(side.read_text())
    y, sr = sf.read(wav)
    assert meta["sample_rate"] == sr == 24000 and meta["samples"] == y.shape[0] == 80 * 320
    assert meta["inputs"]["codes_shape"] == [4, 80] and len(meta["sha256"]) == 64
    assert {"torch", "transformers", "numpy", "soundfile"} <= set(meta["versions"])
    assert compare(None, example="tts", out_dir=tmp_path).codes("fail") == []
    rep = compare(None, example="tts", variant="audio_hop_trim", out_dir=tmp_path)
    assert rep.codes("fail") == ["hop.length_mismatch"]
    assert main(["baseline", "compare", "--example", "tts", "--variant", "audio_offset",
                 "--out", str(tmp_path)]) == 1


def test_never_overwrites_without_force(tmp_path, capsys):
    wav, side = record(None, example="tts", out_dir=tmp_path)
    before = wav.read_bytes()
    assert main(["baseline", "record", "--example", "tts", "--out", str(tmp_path)]) == 2
    assert "--force" in capsys.readouterr().err
    assert wav.read_bytes() == before
    assert main(["baseline", "record", "--example", "tts", "--out", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "tts.wav.bak").read_bytes() == before
    assert (tmp_path / "tts.json.bak").exists()


def test_modified_or_missing_baseline_exits_2(tmp_path, capsys):
    assert main(["baseline", "compare", "--example", "tts", "--out", str(tmp_path)]) == 2
    wav, _ = record(None, example="tts", out_dir=tmp_path)
    y, sr = sf.read(wav)
    sf.write(wav, y * 0.5, sr, subtype="FLOAT")
    capsys.readouterr()
    assert main(["baseline", "compare", "--example", "tts", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "sha256" in err and len(err.strip().splitlines()) == 1


def test_shipped_speech_clips_match_their_sidecars():
    clips = sorted(CLIPS.glob("*.flac"))
    assert len(clips) >= 3
    total = 0
    for clip in clips:
        meta = read_sidecar(clip)  # verifies sha256
        info = sf.info(clip)
        assert info.samplerate == meta["sample_rate"] and info.frames == meta["samples"]
        assert "espeak-ng" in meta["provenance"] or "eSpeak" in meta["provenance"]
        total += clip.stat().st_size
    assert total < 400_000


def test_interrupt_between_clip_and_sidecar_restores_the_old_baseline(tmp_path, monkeypatch):
    """Ctrl-C after the clip and before its sidecar: both files as they were, no stray .bak."""
    import porting_kit.fsutil as fsutil
    from porting_kit.baseline import write_clip

    import numpy as np

    y = np.sin(np.linspace(0, 100, 2400)).astype("float32")
    write_clip(tmp_path / "clip.wav", y, 24000, {"spec": "old"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def interrupted(path, text, *, backup=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(fsutil, "atomic_write_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_clip(tmp_path / "clip.wav", y * 0.5, 24000, {"spec": "new"}, force=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
