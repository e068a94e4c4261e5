"""Spec forms (issue 17, points 9 and 10): an audio-only spec runs the audio families and skips
the rest; the embedded default example runs rng and lifecycle."""

from pathlib import Path

import pytest

from porting_kit.errors import InputError
from porting_kit.runner import run_check
from porting_kit.spec import load_spec

TOY = str(Path(__file__).resolve().parents[1] / "specs" / "toy_codec.py")


def test_audio_only_spec_runs_the_audio_families_and_skips_the_rest():
    rep = run_check(TOY)
    assert rep.exit_code == 0
    by = {f.check: f for f in rep.findings}
    assert [by[f].code for f in ("hop", "channel", "dtype")] == ["hop.ok", "channel.ok", "dtype.ok"]
    for fam in ("config", "parity", "rope", "norm", "rng", "lifecycle"):
        assert by[fam].status == "skip" and by[fam].message, fam


def test_partial_audio_spec_names_what_it_lacks(tmp_path):
    p = tmp_path / "half.py"
    p.write_text("def codes():\n    return None\n\ndef decode_reference(c):\n    return None\n")
    with pytest.raises(InputError, match=r"audio spec lacks decode_candidate\(\)"):
        load_spec(p)


def test_audio_name_that_is_not_a_function_is_bad_input(tmp_path):
    p = tmp_path / "bad.py"
    p.write_text("codes = 3\ndef decode_reference(c):\n    return None\n"
                 "def decode_candidate(c):\n    return None\n")
    with pytest.raises(InputError, match="`codes` must be a function"):
        load_spec(p)


def test_default_example_runs_rng_and_lifecycle_clean():
    rep = run_check(example="tts", only="rng,lifecycle")
    assert rep.codes() == ["rng.ok", "lifecycle.ok"]
