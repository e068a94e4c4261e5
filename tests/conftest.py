"""Shared test setup: offline hub, and a broken CUDA torchaudio must not break transformers.

The tests live in sub-folders mirroring the package (unit, checks, lint, scaffold, cli,
notebooks); this folder goes on ``sys.path`` so they import ``scaffold_helpers`` and
find ``specs/`` whatever pytest's import mode.
"""

import os
import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
except ImportError:  # torch not installed: the hook/scaffold tests still run
    pass


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items):
    """``gpu``-marked tests skip, with the reason shown (``-ra``), where CUDA is not available."""
    import pytest

    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="gpu: CUDA not available (torch.cuda.is_available() is False)")
    for item in items:
        # the marker, not ``"gpu" in item.keywords``: keywords also hold the names of the
        # directories above the test (a checkout in a folder named gpu skipped every test)
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)
