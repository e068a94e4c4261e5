"""Input the tool cannot use: exit 2 with one line, and a user's file is never lost."""

import os
from pathlib import Path

import pytest

from porting_kit.cli import main
from porting_kit.fsutil import atomic_write_text

SPEC = str(Path(__file__).resolve().parents[1] / "specs" / "hf_llama_pair.py")


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("body, needle", [
    ("import sys\nsys.exit('bye')\n", "SystemExit('bye')"),
    ("import sys\nsys.exit(0)\n", "SystemExit(0)"),  # must not be a silent pass
])
def test_spec_exiting_at_import_is_exit_2(tmp_path, capsys, body, needle):
    p = tmp_path / "exits.py"
    p.write_text(body)
    assert main(["check", str(p)]) == 2
    assert needle in _one_line(capsys)


def test_debug_keeps_exit_code_2(capsys):
    assert main(["--debug", "check", "--only", "bogus"]) == 2
    assert "unknown check family bogus" in capsys.readouterr().err


def test_empty_only_is_a_usage_error(capsys):
    assert main(["check", "--only", ""]) == 2
    assert "no check family given" in _one_line(capsys)


def test_json_onto_the_spec_is_refused_and_the_spec_kept(tmp_path, capsys):
    spec = tmp_path / "spec.py"
    spec.write_text(Path(SPEC).read_text())
    before = spec.read_bytes()
    assert main(["check", str(spec), "--only", "config", "--json", str(spec)]) == 2
    assert "is one of this command's inputs" in _one_line(capsys)
    assert spec.read_bytes() == before


def test_json_into_a_directory_is_refused_before_running(tmp_path, capsys):
    assert main(["check", SPEC, "--only", "parity", "--json", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert "PASS" not in out.out and "is a directory" in out.err


def test_audio_output_onto_an_input_and_bad_numbers(tmp_path, capsys):
    np = pytest.importorskip("numpy")
    sf = pytest.importorskip("soundfile")
    wav = tmp_path / "a.wav"
    sf.write(wav, (0.3 * np.sin(np.arange(2400) / 5)).astype("float32"), 24000)
    before = wav.read_bytes()
    assert main(["audio", str(wav), str(wav), "--json", str(wav)]) == 2
    assert "is one of this command's inputs" in _one_line(capsys)
    assert wav.read_bytes() == before
    assert main(["audio", str(wav), str(wav), "--hop-length", "0"]) == 2
    assert "--hop-length" in _one_line(capsys)
    assert main(["audio", str(wav), str(wav), "--sample-rate", "-1"]) == 2
    assert "--sample-rate" in _one_line(capsys)


@pytest.mark.parametrize("argv", [["scaffold", "--bogus-flag"], ["lint", "--bogus"],
                                  ["validate", "--bogus"]])
def test_subcommand_usage_errors_are_one_line(capsys, argv):
    assert main(argv) == 2
    line = _one_line(capsys)
    assert argv[-1] in line and f"porting-kit {argv[0]} --help" in line, line


def test_validate_without_static_says_what_to_pass(capsys):
    assert main(["validate"]) == 2
    line = _one_line(capsys)
    assert "--static DIR" in line and "scaffold --out/--into" in line, line


def test_validate_on_a_folder_that_is_no_scaffold(tmp_path, capsys):
    assert main(["validate", "--static", str(tmp_path)]) == 2
    assert "not a porting-kit scaffold" in _one_line(capsys)


def test_backups_are_numbered_never_overwritten(tmp_path):
    f = tmp_path / "x.txt"
    for text in ("one", "two", "three"):
        atomic_write_text(f, text, backup=True)
    assert f.read_text() == "three"
    assert (tmp_path / "x.txt.bak").read_text() == "one"
    assert (tmp_path / "x.txt.bak.1").read_text() == "two"


def test_new_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644
