"""Ctrl-C (KeyboardInterrupt) half-way through writing a scaffold leaves the previous state:
no partial tree for --out, the old files (and no stray .bak) for --force over a tree."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from scaffold_helpers import make_scaffold, write_config

from porting_kit import fsutil
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold


def _tree(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _interrupt_after(monkeypatch, n: int) -> None:
    real = fsutil.atomic_write_text
    calls = {"n": 0}

    def flaky(path, text, *, backup=False):
        calls["n"] += 1
        if calls["n"] > n:
            raise KeyboardInterrupt
        real(path, text, backup=backup)

    monkeypatch.setattr(fsutil, "atomic_write_text", flaky)


@pytest.mark.parametrize("after", [0, 3, 7])
def test_interrupt_during_fresh_scaffold_leaves_nothing(tmp_path, monkeypatch, after):
    cfg = write_config(tmp_path)
    out = tmp_path / "deep" / "out"
    _interrupt_after(monkeypatch, after)
    with pytest.raises(KeyboardInterrupt):
        scaffold(ScaffoldOptions(framework="vllm-omni", shape="two-stage", model_type="my_tts", config=cfg,
                                 out=out))
    assert not out.exists() and not (tmp_path / "deep").exists()


def test_interrupt_during_force_restores_the_old_tree(tmp_path, monkeypatch):
    root = make_scaffold(tmp_path, "single-stage-ar")
    before = _tree(root)
    (tmp_path / "other").mkdir()
    cfg = write_config(tmp_path / "other", hidden_size=96)  # other content: --force replaces files
    _interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        scaffold(ScaffoldOptions(framework="vllm-omni", shape="single-stage-ar", model_type="my_tts", config=cfg,
                                 out=root, force=True))
    assert _tree(root) == before  # same files, same bytes, no .bak left behind


def _siblings(root: Path) -> list[str]:
    return sorted(p.name for p in root.parent.iterdir())


@pytest.mark.parametrize("after", [0, 1, 100])  # --force rewrites 2 files here
def test_force_builds_beside_and_swaps_old_tree_whole_until_then(tmp_path, monkeypatch, after):
    """--force over a scaffold folder: every write lands in a copy beside it (the old tree is
    never touched while the new one is built); a Ctrl-C at any write leaves the old tree, byte
    for byte, and no copy beside it; a run that completes swaps in the whole new tree."""
    root = make_scaffold(tmp_path, "single-stage-ar")
    (root / "user_notes.txt").write_text("mine\n")  # a file of the user's, kept through the swap
    (tmp_path / "other").mkdir()
    cfg = write_config(tmp_path / "other", hidden_size=96)
    before, siblings = _tree(root), _siblings(root)
    real = fsutil.atomic_write_text
    calls = {"n": 0}

    def watched(path, text, *, backup=False):
        assert root not in Path(path).parents, f"{path}: written inside the live tree"
        assert _tree(root) == before  # the old tree is whole while the new one is built
        calls["n"] += 1
        if calls["n"] > after:
            raise KeyboardInterrupt
        real(path, text, backup=backup)

    monkeypatch.setattr(fsutil, "atomic_write_text", watched)
    opts = ScaffoldOptions(framework="vllm-omni", shape="single-stage-ar", model_type="my_tts", config=cfg,
                           out=root, force=True)
    if after < 100:
        with pytest.raises(KeyboardInterrupt):
            scaffold(opts)
        assert _tree(root) == before and _siblings(root) == siblings
    else:
        result = scaffold(opts)
        after_tree = _tree(root)
        assert _siblings(root) == siblings and after_tree != before
        assert after_tree["user_notes.txt"] == before["user_notes.txt"]
        assert result.backed_up and all(any(k.startswith(b.removesuffix("*")) for k in after_tree)
                                        for b in result.backed_up)


def test_replace_tree_keeps_the_original_inodes_untouched(tmp_path):
    root = tmp_path / "t"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.txt").write_text("old\n")
    (root / "keep.txt").write_text("keep\n")
    seen = {}

    def fill(base):
        seen["during"] = (root / "a" / "x.txt").read_text()
        fsutil.atomic_write_text(base / "a" / "x.txt", "new\n")
        seen["still"] = (root / "a" / "x.txt").read_text()

    fsutil.replace_tree(root, fill)
    assert seen == {"during": "old\n", "still": "old\n"}
    assert (root / "a" / "x.txt").read_text() == "new\n" and (root / "keep.txt").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
