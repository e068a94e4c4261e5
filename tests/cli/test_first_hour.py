"""The small things a new user trips on (issue 26, point 8): each as the user meets it."""

from __future__ import annotations

import importlib.util
import json

import pytest
from scaffold_helpers import make_scaffold

from porting_kit.cli import main
from porting_kit.scaffold.validate import GPU_TIER_NOTE, validate


def test_flags_show_no_bool_metavar(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    for argv in (["--help"], ["check", "--help"], ["lint", "--help"], ["validate", "--help"],
                 ["baseline", "record", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "<bool>" not in out, (argv, out)
        assert "--help" in out


def test_lint_says_how_many_files_a_clean_run_checked(tmp_path, capsys):
    for i in range(3):
        (tmp_path / f"m{i}.py").write_text("x = 1\n")
    assert main(["lint", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert out.out == ""  # stdout stays the findings (none)
    assert out.err == "no findings in 3 file(s) checked\n"


def test_json_says_where_it_wrote_like_plot(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["check", "--example", "tts", "--only", "config", "--json", str(path)]) == 0
    assert capsys.readouterr().err == f"wrote {path}\n"
    assert json.loads(path.read_text())["status"] == "pass"
    assert main(["check", "--example", "tts", "--only", "config", "--json", "-"]) == 0
    out = capsys.readouterr()
    assert "wrote" not in out.err and json.loads(out.out)["status"] == "pass"


def test_shipped_example_spec_runs_from_any_folder(tmp_path, monkeypatch, capsys):
    """A wheel install has no ``examples/`` in the user's folder: the shipped copy is used."""
    if importlib.util.find_spec("llama_models") is None:
        pytest.skip("llama_models is not installed (the examples extra)")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "examples/llama_meta.py", "--only", "config"]) == 0
    assert "config.ok" in capsys.readouterr().out
    assert main(["check", "examples/no_such_spec.py"]) == 2
    assert capsys.readouterr().err.startswith("error: examples/no_such_spec.py: spec file not found")


def test_spec_missing_an_optional_package_gets_the_install_hint(tmp_path, capsys):
    spec = tmp_path / "needs_encodec.py"
    spec.write_text("import encodec.pk_no_such_submodule_26\n")
    assert main(["check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "ModuleNotFoundError" in err and "(install it: pip install 'porting-kit[examples]')" in err
    other = tmp_path / "needs_other.py"
    other.write_text("import pk_no_such_package_26\n")
    assert main(["check", str(other)]) == 2
    assert "(install the package that provides 'pk_no_such_package_26')" in capsys.readouterr().err


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return make_scaffold(tmp_path_factory.mktemp("first_hour"), "single-stage-ar")


def test_static_tier_says_not_part_of_static_only_under_static(single):
    every = validate(single, ["static", "gpu"])
    (tier,) = every.by_code("scaffold.tier")
    assert GPU_TIER_NOTE not in tier.message and "gpu" not in tier.evidence["skipped"].split(",")
    static = validate(single, ["static"])
    (tier,) = static.by_code("scaffold.tier")
    assert GPU_TIER_NOTE in tier.message
