"""The by-hand measure's own rules (benchmarks/handwritten_lines.py), on a small synthetic vLLM-Omni tree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "handwritten_lines.py"


@pytest.fixture(scope="module")
def hl():
    spec = importlib.util.spec_from_file_location("_pk_handwritten_lines", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    del sys.modules[spec.name]


def _tree(root: Path) -> Path:
    """vllm_omni/ with a model ``toy``: a registered talker that imports a codec folder and names a
    scheduler by dotted string; a legacy tokenizer nothing imports."""
    models = root / "model_executor/models"
    toy = models / "toy"
    (toy / "codec").mkdir(parents=True)
    (models / "registry.py").write_text('_OMNI_MODELS = {\n    "ToyForTTS": (\n        "toy",\n        "toy_talker",\n'
                                        '        "ToyTalker",\n    ),\n}\n')
    (toy / "__init__.py").write_text("")
    (toy / "pipeline.py").write_text('SCHED = "vllm_omni.model_executor.models.toy.scheduler.ToyScheduler"\n')
    (toy / "scheduler.py").write_text("class ToyScheduler:\n    pass\n")
    (toy / "toy_talker.py").write_text("from .codec.decoder import Decoder\n\n\nclass ToyTalker:\n    x = 1\n\n"
                                       "    def capture_graph(self):\n        return 1\n")
    (toy / "codec" / "__init__.py").write_text("")
    (toy / "codec" / "decoder.py").write_text("# a comment\nclass Decoder:\n    pass\n")
    (toy / "legacy_tokenizer.py").write_text("from .codec.decoder import Decoder\nX = 1\n")
    return root


def test_only_reachable_files_count(tmp_path, hl):
    root = _tree(tmp_path)
    reach, unreach = hl.reachable_files(root, "toy")
    names = {p.name for p in reach}
    assert {"toy_talker.py", "decoder.py", "pipeline.py", "scheduler.py", "__init__.py"} <= names
    assert [p.name for p in unreach] == ["legacy_tokenizer.py"]


def test_performance_definitions_are_their_own_class(hl):
    text = ("import torch\n\n\ndef forward(x):\n    return x\n\n\ndef _capture(x):\n    return x\n\n\n"
            "def warm(x):\n    g = torch.cuda.CUDAGraph()\n    return g\n")
    assert hl.classify_python(text, "backbone") == {"backbone": 3, "performance": 5}


def test_stand_in_definitions_do_not_survive(hl):
    text = ('class _Decoder:\n    """Stand-in decoder: replace it."""\n\n    def f(self):\n        return 1\n\n\n'
            "def forward(x):\n    return x\n")
    assert hl.surviving_lines(text) == 2


def test_copied_lines_are_vendored(tmp_path, hl):
    up = tmp_path / "pkg"
    up.mkdir()
    (up / "config.py").write_text("a = 1\nb = 2\nc = 3\n")
    mine = "a = 1\nb = 2\nd = 4\nc = 3\n"
    assert hl.vendored_lines(mine, up, "config.py") == {1, 2, 4}
    assert hl.vendored_lines(mine, up, "other.py") == set()
    assert hl.vendored_lines(mine, None, "config.py") == set()
