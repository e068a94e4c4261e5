"""A walkthrough section whose optional package is missing shows a note, the rest runs (issue 26, point 1)."""

import json
import re
from pathlib import Path

import pytest

from porting_kit.errors import InputError
from porting_kit.notebooks import MissingPackages, missing_packages, optional_section

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ABSENT = "pk_no_such_package_26"
#: The optional packages the walkthroughs use, beyond the README's notebook install
#: ``porting-kit[torch,audio,notebooks]``; each must be used only inside ``optional_section``.
OPTIONAL_IMPORTS = ("encodec", "llama_models", "fairscale", "ruff")


def test_missing_package_gives_a_note_and_swallows_its_failure(capsys):
    with optional_section(ABSENT, shows="a plot", install="pip install thing") as section:
        raise InputError(f"{ABSENT} is not installed")
    assert not section.available
    out = capsys.readouterr().out
    assert out.strip() == (f"Skipped: this section shows a plot. It needs {ABSENT}, not installed here; "
                           "to enable it: pip install thing")


def test_missing_package_does_not_hide_other_errors():
    with pytest.raises(ZeroDivisionError):
        with optional_section(ABSENT, shows="x", install="pip install x"):
            1 / 0


def test_present_package_runs_the_block_and_propagates():
    ran = []
    with pytest.raises(InputError):
        with optional_section(["json", "pathlib"], shows="x", install="pip install x") as section:
            ran.append(section.available)
            raise InputError("a real input error")
    assert ran == [True]


def test_note_markdown_names_the_command():
    note = MissingPackages(["encodec"], "the real EnCodec pair", "pip install 'porting-kit[examples]'")
    md = note._repr_markdown_()
    assert "`encodec`" in md and "`pip install 'porting-kit[examples]'`" in md
    assert missing_packages(["json", ABSENT, "a.b.c"]) == [ABSENT, "a.b.c"]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_optional_packages_are_used_only_inside_optional_sections(path):
    """Every code cell that touches an optional package guards it with ``optional_section``."""
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        uses = [m for m in OPTIONAL_IMPORTS if re.search(rf"\b{m}\b|encodec_spec|ruff_check\(", src)]
        if uses and not src.lstrip().startswith(("# Parameters",)):
            calls = [ln for ln in src.splitlines()
                     if re.search(r"encodec_spec,|ruff_check\(out|import (encodec|llama_models|fairscale)", ln)]
            for line in calls:
                assert line.startswith("    ") and "optional_section(" in src, (path.name, i, line)


HIDER = '''
import importlib.abc, sys
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Hide())
'''


@pytest.mark.slow
@pytest.mark.parametrize("name", ["03_audio_checks.ipynb", "05_scaffold.ipynb"])
def test_walkthrough_runs_to_the_end_without_the_optional_packages(name, tmp_path, monkeypatch):
    """The notebook install (no ``examples`` extra, no ruff): a note where the section was, no error."""
    import os

    from test_notebooks import assert_clean, execute, outputs

    hider = tmp_path / "hide"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text(HIDER.format(hidden=set(OPTIONAL_IMPORTS)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hider), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = execute(name, tmp_path / "walk")
    assert_clean(nb, name)
    notes = [o for _, o in outputs(nb) if "Skipped here" in o.get("data", {}).get("text/markdown", "")]
    assert len(notes) == {"03_audio_checks.ipynb": 2, "05_scaffold.ipynb": 1}[name]
    last = next(c for c in reversed(nb.cells) if c.cell_type == "code")
    assert last.execution_count is not None
