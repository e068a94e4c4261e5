"""Shared inputs for the scaffold / validate tests: a TTS config.json, scaffold
trees per shape, the real vLLM-Omni 0.30.0 source tree (unpacked from its wheel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from porting_kit.scaffold.examples import example_config
from porting_kit.scaffold.generate import ScaffoldOptions, scaffold

CONFIG = example_config("my_tts")  #: the example TTS config (porting_kit.scaffold.examples), a copy
SHAPES = ("two-stage", "single-stage-ar", "native-ar")
WHEEL = "vllm_omni-0.30.0-py3-none-any.whl"


def write_config(folder: Path, **changes) -> Path:
    doc = {**CONFIG, **changes}
    path = folder / "config.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def make_scaffold(folder: Path, shape: str, framework: str = "vllm-omni", **kw) -> Path:
    cfg = write_config(folder)
    out = folder / f"out-{framework}-{shape}"
    scaffold(ScaffoldOptions(framework=framework, shape=shape, model_type="my_tts", config=cfg, out=out, **kw))
    return out


def vllm_omni_wheel() -> Path:
    """The vllm-omni 0.30.0 wheel, downloaded once into the cache (skip if impossible)."""
    cache = Path(os.environ.get("PORTING_KIT_CACHE", Path.home() / ".cache" / "porting-kit")) / "wheels"
    wheel = cache / WHEEL
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "vllm-omni==0.30.0",
                               "-d", str(cache)], capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not wheel.is_file():
            pytest.skip(f"pip download vllm-omni==0.30.0 failed: {proc.stderr.strip()[-200:]}")
    return wheel


def unpack_tree(dest: Path) -> Path:
    """A fresh vLLM-Omni source tree (the wheel's vllm_omni/ package) at ``dest``."""
    with zipfile.ZipFile(vllm_omni_wheel()) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if n.startswith("vllm_omni/")])
    return dest


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest
