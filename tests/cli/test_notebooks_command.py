"""``porting-kit notebooks DIR``: copies the walkthroughs and the example specs they use;
never overwrites a user's file without --force (which keeps a .bak); copying twice changes nothing."""

from pathlib import Path

from porting_kit.cli import main
from porting_kit.notebooks import planned_files


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_copies_every_walkthrough_and_example_then_changes_nothing(tmp_path):
    dest = tmp_path / "walk"
    assert main(["notebooks", str(dest)]) == 0
    want = {rel for _, rel in planned_files()}
    assert set(_tree(dest)) == want
    assert any(rel.endswith(".ipynb") for rel in want) and "examples/llama_meta.py" in want
    for src, rel in planned_files():
        assert (dest / rel).read_bytes() == src.read_bytes()
    before = _tree(dest)
    assert main(["notebooks", str(dest)]) == 0
    assert _tree(dest) == before


def test_a_differing_file_stops_the_copy_before_anything_is_written(tmp_path, capsys):
    dest = tmp_path / "walk"
    dest.mkdir()
    first_nb = sorted(rel for _, rel in planned_files() if rel.endswith(".ipynb"))[-1]
    (dest / first_nb).write_text("my own notes")
    assert main(["notebooks", str(dest)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and first_nb in err[0] and "--force" in err[0]
    assert _tree(dest) == {first_nb: b"my own notes"}   # nothing else was written


def test_force_replaces_and_keeps_a_backup(tmp_path):
    dest = tmp_path / "walk"
    dest.mkdir()
    rel = "examples/llama_meta.py"
    (dest / "examples").mkdir()
    (dest / rel).write_text("# mine\n")
    assert main(["notebooks", str(dest), "--force"]) == 0
    src = dict((r, s) for s, r in planned_files())[rel]
    assert (dest / rel).read_bytes() == src.read_bytes()
    backups = [p for p in (dest / "examples").iterdir() if ".bak" in p.name]
    assert [b.read_text() for b in backups] == ["# mine\n"]


def test_dest_that_is_a_file_is_exit_2(tmp_path, capsys):
    f = tmp_path / "walk"
    f.write_text("x")
    assert main(["notebooks", str(f)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert f.read_text() == "x"
