"""Shared test setup: offline hub, and a broken CUDA torchaudio must not break transformers."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

try:
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
except ImportError:  # torch not installed: the hook/scaffold tests still run
    pass
