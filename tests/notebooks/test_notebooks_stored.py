"""The walkthroughs as stored: no outputs, and a ``parameters`` cell first (fast)."""

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_walkthroughs_are_there():
    assert [p.name[:3] for p in NOTEBOOKS] == ["00_", "01_", "02_", "03_", "04_", "05_", "06_", "07_"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert dirty == [], f"{path.name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_first_cell_is_the_parameters_cell(path):
    first = json.loads(path.read_text())["cells"][0]
    assert first["cell_type"] == "code"
    assert first["metadata"].get("tags") == ["parameters"]
    names = {line.split("=")[0].strip() for line in "".join(first["source"]).splitlines()
             if "=" in line and not line.lstrip().startswith("#")}
    assert {"SPEC", "VARIANT", "DEVICE"} <= names
    env: dict = {}
    exec("".join(first["source"]), env)  # plain assignments only
    assert env["VARIANT"] is None and env["DEVICE"] == "cpu"
    assert env["SPEC"] == {"04_": "generator", "07_": "espeak"}.get(path.name[:3], "tts")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_assert_on_the_users_port(path):
    """A port that fails is a result to show, not an exception that stops the walkthrough."""
    src = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                  if c["cell_type"] == "code")
    assert "assert " not in src


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_cell_has_a_unique_id(path):
    """nbformat 4.5 cells carry an ``id`` (else nbformat warns MissingIDFieldWarning on every read)."""
    nb = json.loads(path.read_text())
    assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5)
    ids = [c.get("id") for c in nb["cells"]]
    assert None not in ids, f"{path.name}: cells {[i for i, x in enumerate(ids) if x is None]} lack an id"
    assert len(set(ids)) == len(ids)
