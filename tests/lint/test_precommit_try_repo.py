"""``pre-commit try-repo`` runs the hook from this repository in another repository.

The hook repository is a snapshot of this checkout (pyproject, README,
``.pre-commit-hooks.yaml``, ``porting_kit/``) committed in ``tmp_path``:
``try-repo`` of a local path only carries committed, staged and modified
tracked files, and the test must see the working tree as it is. pre-commit
builds the hook's own virtualenv with ``pip install .`` (core dependencies
only, no torch), so this needs the package index and takes a while.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def _snapshot(dst: Path) -> Path:
    dst.mkdir()
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy2(REPO / name, dst / name)
    shutil.copytree(REPO / "porting_kit", dst / "porting_kit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git(dst, "init", "-q")
    _git(dst, "add", "-A")
    _git(dst, "commit", "-q", "-m", "snapshot")
    return dst


def _try_repo(hook_repo: Path, sample: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), "porting-kit-lint", "--all-files",
         "--color", "never"],
        cwd=sample, capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, **GIT_ENV, "PRE_COMMIT_HOME": str(sample.parent / "pc-home")})


def _index_reachable() -> bool:
    """Whether pip's package index answers (try-repo pip-installs the hook's environment)."""
    import socket
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")).hostname or "pypi.org"
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_try_repo_fails_on_planted_finding_and_passes_when_clean(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    pytest.importorskip("pre_commit", reason="needs pre-commit (the dev extra)")
    if not _index_reachable():
        pytest.skip("no package index reachable: pre-commit try-repo pip-installs the hook")
    hook_repo = _snapshot(tmp_path / "hook-repo")
    sample = tmp_path / "sample"
    (sample / "deploy").mkdir(parents=True)
    (sample / "model.py").write_text("def to_mono(wav):\n    return wav.T.reshape(-1)\n")
    (sample / "deploy" / "m.yaml").write_text(
        "stages:\n  - stage_id: 0\n    max_num_seqs: 8\n    devices: \"0\"\n")
    _git(sample, "init", "-q")
    _git(sample, "add", "-A")
    _git(sample, "commit", "-q", "-m", "planted")

    failed = _try_repo(hook_repo, sample)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "model.py:2:12: PK601" in failed.stdout
    assert " PKY" not in failed.stdout  # the deploy file is clean

    (sample / "model.py").write_text("def to_mono(wav):\n    return wav.mean(dim=0)\n")
    _git(sample, "commit", "-q", "-am", "fixed")
    passed = _try_repo(hook_repo, sample)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout
