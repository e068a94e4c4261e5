"""Every walkthrough runs top to bottom in a kernel with matplotlib's inline backend (slow).

Each is executed from a copy made by :func:`porting_kit.copy_notebooks` (the layout a user gets
from ``porting-kit notebooks DIR``). Asserted: no error output, no ANSI escape in any output, no
"IProgress not found" warning when ipywidgets is installed, and, for every walkthrough but 00, at
least one ``image/png`` output (the inline backend drew a plot of its checks). One walkthrough is
run again with ``SPEC`` / ``VARIANT`` injected (papermill-style: a cell inserted after the
``parameters`` cell) pointing at a failing spec outside the repository.
"""

import importlib.util
import inspect
import shutil
from pathlib import Path

import pytest

import porting_kit

pytestmark = pytest.mark.slow  # a kernel per walkthrough: minutes on 2 cores

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
SPECS = Path(__file__).resolve().parents[1] / "specs"


def _validate_has_tiers() -> bool:
    """``porting_kit.validate(path, tiers=None, spec=None, device=None)`` exists (h-tiers)."""
    validate = getattr(porting_kit, "validate", None)
    return validate is not None and "tiers" in inspect.signature(validate).parameters


def _strings(obj):
    """Every string inside a notebook output (its data, text and traceback)."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def execute(name: str, dest: Path, inject: str | None = None):
    """Copy the walkthroughs into ``dest``, run ``name`` there (kernel cwd = ``dest``); the notebook."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    porting_kit.copy_notebooks(dest)
    nb = nbformat.read(dest / name, as_version=4)
    if inject is not None:
        at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        cell = nbformat.v4.new_code_cell(inject)
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(at + 1, cell)
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(dest)}})
    client.execute()
    return nb


def outputs(nb):
    """``(cell index, output)`` of every code cell's outputs."""
    return [(i, out) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.get("outputs", [])]


def assert_clean(nb, name: str) -> None:
    """No error output, no ANSI escape, no progress-bar fallback warning."""
    errors = [(i, o) for i, o in outputs(nb) if o.get("output_type") == "error"]
    assert not errors, f"{name} cell {errors[0][0]}: {errors[0][1].get('ename')}: {errors[0][1].get('evalue')}"
    ansi = [i for i, o in outputs(nb) if any("\x1b" in s for s in _strings(o))]
    assert ansi == [], f"{name}: ANSI escape codes in the outputs of cells {ansi}"
    if importlib.util.find_spec("ipywidgets") is not None:
        assert not any("IProgress not found" in s for _, o in outputs(nb) for s in _strings(o))


def pngs(nb) -> int:
    return sum("image/png" in o.get("data", {}) for _, o in outputs(nb))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_walkthrough_runs_with_inline_plots(path, tmp_path, monkeypatch):
    if path.name.startswith("06_") and not _validate_has_tiers():
        pytest.skip("needs porting_kit.validate (h-tiers)")
    if path.name.startswith("07_") and shutil.which("espeak-ng") is None:
        pytest.skip("07 speaks its prompts with espeak-ng: apt-get install -y espeak-ng (CI installs it)")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's default: the inline backend
    nb = execute(path.name, tmp_path / "walk")
    assert_clean(nb, path.name)
    if not path.name.startswith("00_"):
        assert pngs(nb) >= 1, f"{path.name}: no plot was displayed inline"


def test_spec_injected_from_outside_the_repository_runs_to_the_end_and_shows_the_failure(
        tmp_path, monkeypatch):
    monkeypatch.delenv("MPLBACKEND", raising=False)
    own = tmp_path / "elsewhere" / "my_port.py"
    own.parent.mkdir()
    shutil.copy(SPECS / "hf_llama_pair.py", own)
    nb = execute("01_layer_parity.ipynb", tmp_path / "walk",
                 inject=f"SPEC = {str(own)!r}\nVARIANT = 'theta'")
    assert_clean(nb, "01 with SPEC injected")
    # the first report shown is the injected port's, failing, with its first divergence
    html = next(o["data"]["text/html"] for _, o in outputs(nb)
                if "porting-kit-report" in o.get("data", {}).get("text/html", ""))
    assert ">FAIL</span> porting-kit check" in html
    assert "<code>parity.first_divergence</code>" in html and "first divergence: reference" in html
    assert pngs(nb) >= 1
