"""check --plot DIR and --progress on the tiny HF pair with a decode-only fault."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from porting_kit.cli import main  # noqa: E402

TINY = str(Path(__file__).resolve().parents[2] / "tests" / "specs" / "decode_tiny.py")


@pytest.mark.slow
def test_plot_dir_gets_layer_and_decode_figures(tmp_path, capsys):
    out = tmp_path / "plots"
    code = main(["check", TINY, "--variant", "mlp_decode", "--only", "parity,decode", "--plot", str(out),
                 "--progress"])
    assert code == 1
    names = sorted(p.name for p in out.iterdir())
    assert names == ["decode_error_per_step.png", "decode_step_by_layer.png", "error_per_layer.png",
                     "error_per_module.png"]
    assert all((out / n).read_bytes()[:4] == b"\x89PNG" for n in names)
    err = capsys.readouterr().err
    assert "porting-kit: check: decode: locating step 1" in err


def test_plot_path_that_is_a_file_is_exit_2(tmp_path, capsys):
    f = tmp_path / "p.png"
    f.write_text("x")
    assert main(["check", TINY, "--only", "decode", "--plot", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--plot" in err[0] and "not a directory" in err[0]
