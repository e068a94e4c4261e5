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
